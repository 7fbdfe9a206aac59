"""Helpers of the launcher tests: the command table that runs the stand-ins of
`aenv_cli_standins/` in place of the real services."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aenv_cli.platform import Platform

TESTS_DIR = Path(__file__).parent


def standin(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"aenv_cli_standins.{module}", *args]


STANDIN_COMMANDS: dict[str, list[str]] = {
    "scheduler": standin("grpc_service", "scheduler", "AENV_SCHEDULER_LISTEN"),
    "snapstore": standin("grpc_service", "snapstore", "AENV_SNAPSTORE_LISTEN"),
    "nodeagent": standin("nodeagent"),
    "gateway": standin("gateway"),
}


def standin_env() -> dict[str, str]:
    """The test's environment, with the stand-ins importable (and everything the test imports)."""
    paths = [str(TESTS_DIR), *(p for p in sys.path if p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


PlatformFactory = Callable[..., Platform]


SPAN_T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def span_line(
    trace: str, sid: str, parent: str | None, service: str, name: str, start_ms: float,
    dur_ms: float, kind: str = "SERVER", **attributes: Any,
) -> dict[str, Any]:
    """A span as the services' JSON-lines exporters write it (aenv_common/telemetry.py)."""
    return {
        "trace_id": trace, "span_id": sid, "parent_id": parent, "name": name,
        "service": service, "kind": kind, "start_ns": SPAN_T0 + int(start_ms * MS),
        "end_ns": SPAN_T0 + int((start_ms + dur_ms) * MS), "status": "UNSET",
        "attributes": attributes,
    }
