"""`aenv trace`: find the trace of a sandbox (or a trace id) in the JSON-lines span files every
service writes, and draw it as a tree of spans with start offsets and durations (a rollout's
sandboxes: rollout_traces.py, drawn with the same spans)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text
from rich.tree import Tree

from aenv_common.errors import NotFound
from aenv_common.rollout import SANDBOX_ID

# The attribute a span about a sandbox names it by (aenv_common/rollout.py), and the one older
# trace files used.
SANDBOX_ATTRIBUTES = (SANDBOX_ID, "sandbox.id")
BAR_WIDTH = 24

Span = dict[str, Any]


def spans_of_trace(spans: Iterable[Span], trace_id: str) -> list[Span]:
    return [span for span in spans if span.get("trace_id") == trace_id]


def sandbox_trace_ids(spans: Sequence[Span], sandbox_id: str) -> list[str]:
    """Ids of the traces that touched the sandbox, oldest first (the first is its create)."""
    first_start: dict[str, int] = {}
    for span in spans:
        tags = span.get("attributes") or {}
        if any(tags.get(name) == sandbox_id for name in SANDBOX_ATTRIBUTES):
            trace_id, start = span["trace_id"], span["start_ns"]
            first_start[trace_id] = min(first_start.get(trace_id, start), start)
    return sorted(first_start, key=first_start.__getitem__)


def find_traces(spans: Sequence[Span], ident: str) -> list[str]:
    """`ident` is a trace id, or a sandbox id (every trace that touched it, oldest first)."""
    if any(span.get("trace_id") == ident for span in spans):
        return [ident]
    trace_ids = sandbox_trace_ids(spans, ident)
    if not trace_ids:
        raise NotFound(f"no trace or sandbox {ident!r} in the recorded spans")
    return trace_ids


def render_trace(spans: Sequence[Span]) -> Tree:
    """One trace as a tree: each span shows its service, name, start offset from the trace's
    first span, duration, and a bar placing it on the trace's time line."""
    if not spans:
        raise NotFound("empty trace")
    start = min(span["start_ns"] for span in spans)
    end = max(end_ns(span) for span in spans)
    total = max(end - start, 1)
    tree = Tree(Text.assemble(("trace ", "bold"), spans[0]["trace_id"], f"  {ms(total)} total"))
    children = _children_by_parent(spans)
    ids = {span["span_id"] for span in spans}
    roots = [span for span in spans if span.get("parent_id") not in ids]
    for root in _by_start(roots):
        add_span(tree, root, children, start, total)
    return tree


def add_span(
    parent: Tree, span: Span, children: dict[str, list[Span]], start: int, total: int
) -> None:
    node = parent.add(_label(span, start, total))
    for child in _by_start(children.get(span["span_id"], [])):
        add_span(node, child, children, start, total)


def _label(span: Span, start: int, total: int) -> Text:
    offset = span["start_ns"] - start
    duration = end_ns(span) - span["start_ns"]
    failed = span.get("status") == "ERROR"
    return Text.assemble(
        (f"{span.get('service') or '?'}", "cyan"),
        " ",
        (span["name"], "bold red" if failed else "bold"),
        f"  +{ms(offset)}  {ms(duration)}  ",
        (_bar(offset, duration, total), "magenta"),
    )


def _bar(offset: int, duration: int, total: int) -> str:
    first = min(BAR_WIDTH - 1, offset * BAR_WIDTH // total)
    length = max(1, round(duration * BAR_WIDTH / total))
    length = min(length, BAR_WIDTH - first)
    return "·" * first + "█" * length + "·" * (BAR_WIDTH - first - length)


def _children_by_parent(spans: Iterable[Span]) -> dict[str, list[Span]]:
    children: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        if span.get("parent_id"):
            children[span["parent_id"]].append(span)
    return children


def _by_start(spans: Iterable[Span]) -> list[Span]:
    return sorted(spans, key=lambda span: span["start_ns"])


def end_ns(span: Span) -> int:
    # A span still open when it was written has no end: treat it as instantaneous.
    end = span.get("end_ns")
    return int(end) if end is not None else int(span["start_ns"])


def ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms"
