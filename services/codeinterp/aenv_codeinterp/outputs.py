"""The lines of an `/execute` stream, as the SDK's `parse_output` reads them (pure).

Each is one JSON object with a `type`: `number_of_executions`, `stdout`, `stderr`, `result`,
`error`, `keepalive` (the SDK ignores it; it keeps idle proxies from closing a quiet stream) and
last `end_of_execution`. A result carries each MIME representation under the SDK's name for it,
the rest under `extra`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

Output = dict[str, Any]

# MIME type -> the Result field the SDK maps it to.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}

KEEPALIVE: Output = {"type": "keepalive"}
END: Output = {"type": "end_of_execution"}


def now_ns() -> int:
    return time.time_ns()


def stream(name: str, text: str) -> Output:
    """`name` is stdout or stderr."""
    return {"type": name, "text": text, "timestamp": now_ns()}


def execution_count(count: int) -> Output:
    return {"type": "number_of_executions", "execution_count": count}


def error(name: str, value: str, traceback: str) -> Output:
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def result(bundle: Mapping[str, Any], *, main: bool) -> Output:
    """A Jupyter MIME bundle as a result; a text/plain repr of a str loses its quotes, as
    E2B's server does, so `'a'` reads back as `a`."""
    out: Output = {"type": "result", "is_main_result": main}
    extra: dict[str, Any] = {}
    for mime, value in bundle.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            out[field] = value
    text = out.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == "'":
        out["text"] = text[1:-1]
    if extra:
        out["extra"] = extra
    return out


def line(output: Output) -> bytes:
    return json.dumps(output, default=str).encode() + b"\n"
