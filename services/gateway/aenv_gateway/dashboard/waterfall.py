"""A sandbox's traces as a waterfall: the spans every service wrote to its JSON-lines files
(the same files `aenv trace` reads), one bar per span at its offset and length. A gateway that
keeps no span files (no trace_dir, or its services on other hosts) says so instead."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aenv_common.rollout import SANDBOX_ID
from aenv_common.telemetry import read_trace_files
from aenv_gateway.dashboard.html import esc

MAX_TRACES = 5
# The dashboard's own pages touch the sandboxes they show: their traces are not the sandbox's.
OWN_PAGES = "GET /dashboard"
MAX_SPANS = 60
WIDTH = 300


def _traces_of(spans: list[dict[str, Any]], sandbox_id: str) -> dict[str, list[dict[str, Any]]]:
    """The newest traces naming the sandbox, each with all its spans, oldest trace first."""
    ids = {s["trace_id"] for s in spans
           if (s.get("attributes") or {}).get(SANDBOX_ID) == sandbox_id}
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        if span.get("trace_id") in ids:
            traces.setdefault(span["trace_id"], []).append(span)
    ordered = sorted(((tid, spans) for tid, spans in traces.items()
                      if not any(str(s.get("name", "")).startswith(OWN_PAGES) for s in spans)),
                     key=lambda t: min(s["start_ns"] for s in t[1]))
    return dict(ordered[-MAX_TRACES:])


def _waterfall(trace_id: str, spans: list[dict[str, Any]]) -> str:
    spans = sorted(spans, key=lambda s: s["start_ns"])[:MAX_SPANS]
    start = spans[0]["start_ns"]
    total = max(1, max(s["end_ns"] for s in spans) - start)
    rows = []
    for span in spans:
        offset, length = span["start_ns"] - start, span["end_ns"] - span["start_ns"]
        x, w = WIDTH * offset / total, max(1.0, WIDTH * length / total)
        rows.append(
            f'<tr><th scope="row">{esc(span.get("name", ""))}</th>'
            f"<td>{offset / 1e6:.1f} ms</td><td>{length / 1e6:.1f} ms</td>"
            f'<td><svg width="{WIDTH}" height="10" aria-hidden="true">'
            f'<rect x="{x:.1f}" width="{w:.1f}" height="10" fill="#2563eb"/></svg></td></tr>')
    return (f"<table><caption>Trace {esc(trace_id)} ({total / 1e6:.1f} ms)</caption>"
            '<thead><tr><th scope="col">Span</th><th scope="col">Start</th>'
            '<th scope="col">Duration</th><th scope="col">Timeline</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


async def trace_section(trace_dir: Path | None, sandbox_id: str) -> str:
    head = "<section aria-labelledby=h-trace><h2 id=h-trace>Traces</h2>"
    if trace_dir is None:
        return (head + "<p>This gateway keeps no span files (no trace directory set): "
                "the events above name each operation's trace id.</p></section>")
    spans = await asyncio.to_thread(read_trace_files, trace_dir)
    traces = _traces_of(spans, sandbox_id)
    if not traces:
        return head + "<p>No spans of this sandbox in the trace files here.</p></section>"
    return head + "".join(_waterfall(tid, s) for tid, s in traces.items()) + "</section>"
