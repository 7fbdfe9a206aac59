"""The templates page (each template's builds and their logs), the nodes page (the node records
the scheduler places by: capacity, use, pressure, VMM confinement) and the events page (the
retained events, then each new one as it happens: an SSE stream of rendered rows)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError
from aenv_gateway.core.events.reader import EventFilter, EventPage
from aenv_gateway.dashboard.html import age, esc, iso, row, table
from aenv_gateway.dashboard.parts import DashboardParts

EVENT_HEADERS = ("Time", "Sandbox", "Event", "Template", "Node", "Detail")
BUILD_LOG_LINES = 500
HEARTBEAT_S = 15.0


def _status(build: c.TemplateBuildRecord | None) -> str:
    if build is None:
        return ""
    name: str = c.BuildStatus.Name(build.status)
    return name.removeprefix("BUILD_STATUS_").lower()


def event_row(event: c.SandboxEvent) -> str:
    name = c.SandboxEventType.Name(event.type).removeprefix("SANDBOX_EVENT_TYPE_").lower()
    sid = event.sandbox_id
    return row([esc(iso(event.time)), f'<a href="/dashboard/sandboxes/{esc(sid)}">{esc(sid)}</a>',
                esc(name), esc(event.template_id), esc(event.node_id), esc(event.detail)])


class ClusterPages:
    def __init__(self, parts: DashboardParts) -> None:
        self._parts = parts

    async def templates_body(self) -> str:
        catalog = self._parts.catalog
        rows = []
        for template in await catalog.list_templates():
            latest = await catalog.latest_build(template)
            tid = template.template_id
            rows.append(row([
                f'<a href="/dashboard/templates/{esc(tid)}">{esc(tid)}</a>',
                esc(", ".join(template.names)), esc(template.build_count), esc(_status(latest)),
                esc(f"{template.resources.vcpus} vCPU, {template.resources.memory_mib} MiB"),
                esc(iso(template.updated_at))], header_first=True))
        body = "".join(rows) or '<tr><td colspan="6">No templates built yet.</td></tr>'
        return table("Templates built through the template API",
                     ("Template", "Names", "Builds", "Latest build", "Resources", "Updated"), body)

    async def template_body(self, template_id: str) -> str:
        catalog = self._parts.catalog
        template = await catalog.require(template_id)
        builds = sorted(await catalog.builds_of(template.template_id),
                        key=lambda b: b.created_at.ToNanoseconds(), reverse=True)
        out = [f"<p>Names: {esc(', '.join(template.names))}</p>"]
        for i, build in enumerate(builds):
            logs = "\n".join(f"{iso(e.time)} [{e.step}] {e.level}: {e.message}"
                             for e in build.logs[-BUILD_LOG_LINES:])
            reason = (f'<p class="error">Failed at step {esc(build.reason_step)}: '
                      f"{esc(build.reason)}</p>") if build.reason else ""
            out.append(
                f"<details{' open' if i == 0 else ''}><summary>Build {esc(build.build_id)}: "
                f"{esc(_status(build))}, {esc(iso(build.created_at))}</summary>{reason}"
                f'<pre tabindex="0" aria-label="Build log of {esc(build.build_id)}">'
                f"{esc(logs) or 'No log.'}</pre></details>")
        if not builds:
            out.append("<p>No builds.</p>")
        return "".join(out)

    def nodes_body(self) -> str:
        now = time.time()
        rows = []
        for node in sorted(self._parts.view.nodes(), key=lambda n: n.node_id):
            cap, used = node.capacity, node.allocated
            rows.append(row([
                esc(node.node_id), esc(node.sandbox_count),
                esc(f"{used.vcpus} / {cap.vcpus}"),
                esc(f"{used.memory_mib} / {cap.memory_mib} MiB"),
                esc(f"{node.memory_used_mib} / {node.memory_budget_mib} MiB"
                    if node.memory_budget_mib else "not measured"),
                esc(node.pressure or "none"), esc(node.confinement), esc(node.accelerator),
                esc(age(node.heartbeat_time, now))], header_first=True))
        body = "".join(rows) or '<tr><td colspan="9">No nodes registered.</td></tr>'
        return table("Nodes and their capacity", (
            "Node", "Sandboxes", "vCPUs allocated", "Memory allocated", "Memory used (PSS)",
            "Pressure", "VMM confinement", "Accelerator", "Heartbeat age"), body)

    async def events_body(self, caller: str) -> str:
        events = await self._parts.events.list(EventFilter(caller), EventPage(0, 100))
        rows = "".join(event_row(e) for e in events)
        return ('<p role="status" aria-live="polite" id="events-status" '
                'data-stream="/dashboard/events/stream">Newest first; new events appear '
                "at the top as they happen.</p>"
                + table("Lifecycle events", EVENT_HEADERS, rows, "event-rows"))

    async def stream(
        self, caller: str, valid: Callable[[], bool], after: str = ""
    ) -> AsyncIterator[bytes]:
        """SSE of rendered rows (the key's events only, as the API's stream), heartbeats
        between them; an `end` event when the subscription is cut or the session ends
        (`valid` is asked at each event and heartbeat: a revoked key's stream stops). A
        reconnecting browser's `after` (its Last-Event-ID) replays what it missed, when that is
        still retained (else the stream starts from now)."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                subscriber = await stack.enter_async_context(
                    self._parts.hub.subscribe(EventFilter(caller), after))
            except AenvError:
                subscriber = await stack.enter_async_context(
                    self._parts.hub.subscribe(EventFilter(caller)))
            yield b": connected\n\n"
            while True:
                try:
                    event = await subscriber.next(HEARTBEAT_S)
                except AenvError as err:
                    yield f"event: end\ndata: {json.dumps(err.message)}\n\n".encode()
                    return
                if not valid():
                    yield b"event: end\ndata: \"the session ended\"\n\n"
                    return
                if event is None:
                    yield b": keep-alive\n\n"
                    continue
                yield f"id: {event.event_id}\ndata: {json.dumps(event_row(event))}\n\n".encode()
