"""`aenv trace --rollout <id>`: every sandbox of a trainer's rollout, by group and step, each with
its operations drawn as span trees on the rollout's one time line (a waterfall).

A sandbox belongs to the rollout its spans name (`aenv.rollout_id`, from its metadata; see
aenv_common/rollout.py). Its operations are the spans tagged with its id and everything under
them (the gRPC hops, envd's spans), whichever trace they are in: its create and later calls are in
their callers' traces, its timeout or death in its creator's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.text import Text
from rich.tree import Tree

from aenv_cli.traces import Span, add_span, end_ns, ms
from aenv_common.errors import NotFound
from aenv_common.rollout import GROUP_ID, ROLLOUT_ID, SANDBOX_ID, STEP

NO_GROUP = "(no group)"
NO_STEP = "(no step)"


@dataclass
class RolloutSandbox:
    """One sandbox of the rollout: its group, step, and the spans of its operations."""

    sandbox_id: str
    group_id: str = ""
    step: str = ""
    spans: list[Span] = field(default_factory=list)

    @property
    def start_ns(self) -> int:
        return min(int(span["start_ns"]) for span in self.spans)


def rollout_sandboxes(
    spans: Sequence[Span], rollout_id: str, group_id: str | None = None
) -> list[RolloutSandbox]:
    """The rollout's sandboxes (of `group_id` only, when given), by first span.

    :raise NotFound: no recorded span names the rollout (or the group in it).
    """
    found: dict[str, RolloutSandbox] = {}
    for span in spans:
        tags = span.get("attributes") or {}
        sandbox_id = tags.get(SANDBOX_ID)
        if tags.get(ROLLOUT_ID) != rollout_id or not sandbox_id:
            continue
        sandbox = found.setdefault(sandbox_id, RolloutSandbox(sandbox_id))
        sandbox.group_id = sandbox.group_id or str(tags.get(GROUP_ID, ""))
        sandbox.step = sandbox.step or str(tags.get(STEP, ""))
    if group_id is not None:
        found = {k: v for k, v in found.items() if v.group_id == group_id}
    if not found:
        within = f" group {group_id!r} of" if group_id is not None else ""
        raise NotFound(f"no sandbox of{within} rollout {rollout_id!r} in the recorded spans")
    for sandbox_id, spans_of in _operations(spans, set(found)).items():
        found[sandbox_id].spans = spans_of
    return sorted(found.values(), key=lambda sandbox: sandbox.start_ns)


def _operations(spans: Sequence[Span], sandbox_ids: set[str]) -> dict[str, list[Span]]:
    """Each sandbox's spans: those tagged with its id, and every span under one of them."""
    children: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for span in spans:
        if span.get("parent_id"):
            children[(span["trace_id"], span["parent_id"])].append(span)
    out: dict[str, list[Span]] = {}
    for sandbox_id in sandbox_ids:
        tagged = [s for s in spans if (s.get("attributes") or {}).get(SANDBOX_ID) == sandbox_id]
        seen: dict[tuple[str, str], Span] = {}
        pending = list(tagged)
        while pending:
            span = pending.pop()
            key = (span["trace_id"], span["span_id"])
            if key not in seen:
                seen[key] = span
                pending.extend(children.get(key, ()))
        out[sandbox_id] = list(seen.values())
    return out


def render_rollout(rollout_id: str, sandboxes: Sequence[RolloutSandbox]) -> Tree:
    """The rollout as a tree: group, step, sandbox, then each sandbox's operations as span
    trees, every span placed on the rollout's time line (offset from its first span)."""
    every = [span for sandbox in sandboxes for span in sandbox.spans]
    start = min(int(span["start_ns"]) for span in every)
    total = max(max(end_ns(span) for span in every) - start, 1)
    tree = Tree(Text.assemble(("rollout ", "bold"), rollout_id,
                              f"  {len(sandboxes)} sandboxes  {ms(total)} total"))
    for group_id, steps in _grouped(sandboxes).items():
        group = tree.add(Text.assemble(("group ", "bold"), group_id))
        for step, members in steps.items():
            branch = group.add(Text.assemble(("step ", "bold"), step))
            for sandbox in members:
                _add_sandbox(branch, sandbox, start, total)
    return tree


def _grouped(
    sandboxes: Iterable[RolloutSandbox],
) -> dict[str, dict[str, list[RolloutSandbox]]]:
    """Sandboxes by group, then step; groups by name, steps in numeric order when numbers."""
    by_group: dict[str, dict[str, list[RolloutSandbox]]] = defaultdict(lambda: defaultdict(list))
    for sandbox in sandboxes:
        by_group[sandbox.group_id or NO_GROUP][sandbox.step or NO_STEP].append(sandbox)
    return {group: dict(sorted(steps.items(), key=lambda item: _step_order(item[0])))
            for group, steps in sorted(by_group.items())}


def _step_order(step: str) -> tuple[int, float, str]:
    try:
        return (0, float(step), step)
    except ValueError:
        return (1, 0.0, step)


def _add_sandbox(parent: Tree, sandbox: RolloutSandbox, start: int, total: int) -> None:
    node = parent.add(Text.assemble(("sandbox ", "bold"), (sandbox.sandbox_id, "green"),
                                    f"  {len(sandbox.spans)} spans"))
    children: dict[str, list[Span]] = defaultdict(list)
    ids = {(span["trace_id"], span["span_id"]) for span in sandbox.spans}
    roots: list[Span] = []
    for span in sandbox.spans:
        parent_key = (span["trace_id"], span.get("parent_id") or "")
        if parent_key in ids:
            children[span["parent_id"]].append(span)
        else:
            roots.append(span)
    for root in sorted(roots, key=lambda span: span["start_ns"]):
        add_span(node, root, children, start, total)
