"""The sandboxes page (filtered server-side, a page at a time, its table refreshed by the
script from `/dashboard/sandboxes/rows`) and one sandbox's page (logs, metrics, events, trace)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument
from aenv_gateway.core.events.reader import EventFilter, EventPage
from aenv_gateway.core.listing import PAUSED, RUNNING, VISIBLE_STATES, ListQuery
from aenv_gateway.dashboard.html import (
    action,
    age,
    esc,
    iso,
    row,
    select,
    table,
    text_input,
)
from aenv_gateway.dashboard.parts import DashboardParts
from aenv_gateway.dashboard.svg import metrics_plot
from aenv_gateway.dashboard.waterfall import trace_section

STATES = {"": VISIBLE_STATES, "running": frozenset({RUNNING}), "paused": frozenset({PAUSED})}
STATE_NAMES = {RUNNING: "running", PAUSED: "paused"}
HEADERS = ("Sandbox", "State", "Template", "Node", "Age", "CPU", "Memory", "Actions")
LOG_LINES = 200
WEEK_MS = 7 * 24 * 3600 * 1000


def parse_metadata(text: str) -> dict[str, str]:
    """`k=v` pairs, separated by commas or spaces. :raise InvalidArgument: a pair without `=`."""
    pairs: dict[str, str] = {}
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"metadata filter {part!r} is not k=v")
        pairs[key] = value
    return pairs


def list_query(params: Mapping[str, str], page_size: int) -> ListQuery:
    state = params.get("state", "")
    if state not in STATES:
        raise InvalidArgument("state must be running or paused")
    return ListQuery(states=STATES[state], metadata=parse_metadata(params.get("metadata", "")),
                     template=params.get("template") or None, limit=page_size,
                     cursor=params.get("cursor") or None)


def template_name(record: cluster_pb2.SandboxRecord) -> str:
    return record.alias or record.catalog_template_id or record.template_id


class SandboxPages:
    def __init__(self, parts: DashboardParts) -> None:
        self._parts = parts

    async def rows(self, params: Mapping[str, str], csrf: str) -> tuple[str, str | None, int]:
        """The table's rows, the next page's cursor and how many rows."""
        page = self._parts.service.list(list_query(params, self._parts.page_size))
        latest = await self._parts.metrics.latest([r.sandbox_id for r in page.items])
        now = time.time()
        out = []
        for record in page.items:
            sid = record.sandbox_id
            metric = latest.get(sid)
            cpu = f"{metric.cpu_used_pct:.1f}%" if metric else ""
            mem = f"{metric.mem_used // 2**20} / {metric.mem_total // 2**20} MiB" if metric else ""
            out.append(row([
                f'<a href="/dashboard/sandboxes/{esc(sid)}">{esc(sid)}</a>',
                esc(STATE_NAMES.get(record.state, "")), esc(template_name(record)),
                esc(record.node_id), esc(age(record.started_at, now)), esc(cpu), esc(mem),
                self.actions(record, csrf)], header_first=True))
        if not out:
            out.append(f'<tr><td colspan="{len(HEADERS)}">No sandboxes match.</td></tr>')
        return "".join(out), page.next_cursor, len(page.items)

    def actions(self, record: cluster_pb2.SandboxRecord, csrf: str) -> str:
        base = f"/dashboard/sandboxes/{record.sandbox_id}"
        toggle = (action(f"{base}/pause", "Pause", csrf, record.sandbox_id)
                  if record.state == RUNNING
                  else action(f"{base}/resume", "Resume", csrf, record.sandbox_id))
        return toggle + action(f"{base}/kill", "Kill", csrf, record.sandbox_id)

    async def list_body(self, params: Mapping[str, str], csrf: str) -> str:
        rows, cursor, count = await self.rows(params, csrf)
        state = params.get("state", "")
        form = (
            '<form method="get" action="/dashboard/sandboxes" role="search" '
            'aria-label="Filter sandboxes">'
            + select("state", "State", [("", "running and paused"), ("running", "running"),
                                        ("paused", "paused")], state) + " "
            + text_input("template", "Template", params.get("template", "")) + " "
            + text_input("metadata", "Metadata", params.get("metadata", ""), "k=v, k2=v2")
            + ' <button type="submit">Filter</button></form>')
        kept = {k: params[k] for k in ("state", "template", "metadata") if params.get(k)}
        query = "&".join(f"{esc(k)}={esc(v)}" for k, v in kept.items())
        next_link = (f'<p><a href="/dashboard/sandboxes?{query}&amp;cursor={esc(cursor)}" '
                     'rel="next">Next page</a></p>') if cursor else ""
        refresh = (f'<p role="status" aria-live="polite" id="refresh-status" '
                   f'data-rows="/dashboard/sandboxes/rows?{query}'
                   f'{"&amp;cursor=" + esc(params["cursor"]) if params.get("cursor") else ""}">'
                   f"{count} shown; refreshed every 5 s</p>")
        return form + refresh + table("Sandboxes", HEADERS, rows, "sandbox-rows") + next_link

    async def detail_body(self, sandbox_id: str, caller: str, csrf: str) -> str:
        parts = self._parts
        record = await parts.service.get(sandbox_id)
        facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in (
            ("State", STATE_NAMES.get(record.state, "")), ("Template", template_name(record)),
            ("Node", record.node_id), ("Started", iso(record.started_at)),
            ("Ends", iso(record.end_at)),
            ("Metadata", ", ".join(f"{k}={v}" for k, v in sorted(record.metadata.items())))))
        samples = await parts.metrics.history(sandbox_id)
        entries = await parts.logs(sandbox_id, nodeagent_pb2.GetSandboxLogsRequest(
            start_ms=time.time_ns() // 1_000_000 - WEEK_MS, limit=LOG_LINES))
        events = await parts.events.list(EventFilter(caller, sandbox_id=sandbox_id),
                                         EventPage(0, 100, ascending=True))
        log_text = "\n".join(e.line or e.message for e in entries)
        event_rows = "".join(row([esc(iso(e.time)), esc(cluster_pb2.SandboxEventType.Name(
            e.type).removeprefix("SANDBOX_EVENT_TYPE_").lower()), esc(e.detail),
            esc(e.trace_id)]) for e in events) or '<tr><td colspan="4">None retained.</td></tr>'
        return (
            f"<section aria-labelledby=h-facts><h2 id=h-facts>Sandbox</h2><dl>{facts}</dl>"
            f"{self.actions(record, csrf)}</section>"
            f"<section aria-labelledby=h-metrics><h2 id=h-metrics>Metrics</h2>"
            f"{metrics_plot(samples)}</section>"
            f"<section aria-labelledby=h-events><h2 id=h-events>Lifecycle events</h2>"
            + table("Lifecycle events, oldest first", ("Time", "Event", "Detail", "Trace"),
                    event_rows) + "</section>"
            + await trace_section(parts.trace_dir, sandbox_id)
            + f"<section aria-labelledby=h-logs><h2 id=h-logs>Logs</h2>"
            f'<pre tabindex="0" aria-label="Console logs">{esc(log_text) or "No logs."}</pre>'
            "</section>")
