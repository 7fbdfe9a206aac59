"""The dashboard's pages over the gateway's operations: the sandboxes listed, filtered and paged
server-side; one sandbox's metrics, logs and events; the actions; templates, nodes, events (and
their stream, scoped to the key); nothing loaded from anywhere but the gateway."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

from aenv.cluster.v1 import cluster_pb2 as c
from aenv.nodeagent.v1 import nodeagent_pb2

from ..conftest import API_KEY, Stack
from ..fakes import NODE_ID
from .helpers import AUTH, client, create, login

ROW = re.compile(r'<th scope="row"><a href="/dashboard/sandboxes/([^"]+)">')


async def test_sandboxes_are_filtered_server_side(stack: Stack) -> None:
    async with client(stack) as http:
        await login(http)
        red = await create(http, metadata={"team": "red", "run": "1"})
        blue = await create(http, metadata={"team": "blue"})
        page = await http.get("/dashboard/sandboxes")
        assert set(ROW.findall(page.text)) == {red, blue}
        assert NODE_ID in page.text and "12.5%" in page.text  # node, latest CPU sample
        only_red = await http.get("/dashboard/sandboxes", params={"metadata": "team=red"})
        assert ROW.findall(only_red.text) == [red]
        both = await http.get("/dashboard/sandboxes/rows", params={"metadata": "team=red run=1"})
        assert ROW.findall(both.text) == [red] and "<html" not in both.text
        assert ROW.findall((await http.get("/dashboard/sandboxes",
                                           params={"state": "paused"})).text) == []
        assert ROW.findall((await http.get("/dashboard/sandboxes",
                                           params={"template": "nope"})).text) == []
        bad = await http.get("/dashboard/sandboxes", params={"metadata": "novalue"})
        assert bad.status_code == 400 and 'role="alert"' in bad.text


async def test_many_sandboxes_come_a_page_at_a_time(stack: Stack) -> None:
    async with client(stack) as http:
        await login(http)
        made = set(await asyncio.gather(*(create(http) for _ in range(55))))
        first = await http.get("/dashboard/sandboxes")
        shown = ROW.findall(first.text)
        assert len(shown) == 50
        link = re.search(r'href="(/dashboard/sandboxes\?[^"]*cursor=[^"]+)" rel="next"',
                         first.text)
        assert link is not None
        second = await http.get(link.group(1).replace("&amp;", "&"))
        rest = ROW.findall(second.text)
        assert len(rest) == 5 and set(shown) | set(rest) == made
        assert 'rel="next"' not in second.text


async def test_pause_resume_and_kill_through_the_buttons(stack: Stack) -> None:
    async with client(stack) as http:
        csrf = await login(http)
        sid = await create(http)
        page = await http.get("/dashboard/sandboxes")
        assert f'action="/dashboard/sandboxes/{sid}/pause"' in page.text
        paused = await http.post(f"/dashboard/sandboxes/{sid}/pause", data={"csrf": csrf})
        assert paused.status_code == 303 and paused.headers["location"].endswith(sid)
        assert [p.sandbox_id for p in stack.nodeagent.pauses] == [sid]
        detail = await http.get(f"/dashboard/sandboxes/{sid}")
        assert f'action="/dashboard/sandboxes/{sid}/resume"' in detail.text
        again = await http.post(f"/dashboard/sandboxes/{sid}/pause", data={"csrf": csrf})
        assert again.status_code == 409 and "already paused" in again.text
        resumed = await http.post(f"/dashboard/sandboxes/{sid}/resume", data={"csrf": csrf})
        assert resumed.status_code == 303 and stack.nodeagent.resumes == 1
        killed = await http.post(f"/dashboard/sandboxes/{sid}/kill", data={"csrf": csrf})
        assert killed.status_code == 303
        gone = await http.get(f"/v2/sandboxes/{sid}", headers=AUTH)
        assert gone.status_code == 404
        assert (await http.get(f"/dashboard/sandboxes/{sid}")).status_code == 404


async def test_one_sandboxs_page(stack: Stack) -> None:
    async with client(stack) as http:
        await login(http)
        sid = await create(http, metadata={"who": "<script>alert(1)</script>"})
        entry = nodeagent_pb2.SandboxLogEntry(line="hello from the guest", message="hello")
        entry.timestamp.GetCurrentTime()
        stack.nodeagent.logs[sid] = [entry]
        event = c.SandboxEvent(sandbox_id=sid, type=c.SANDBOX_EVENT_TYPE_CREATED,
                               owner_key_id="admin", trace_id="ab" * 16)
        assert stack.gateway.event_store is not None
        await stack.gateway.event_store.record(event)  # type: ignore[attr-defined]
        page = await http.get(f"/dashboard/sandboxes/{sid}")
        assert page.status_code == 200
        assert "<svg" in page.text and "<polyline" in page.text  # the metrics plot
        assert "hello from the guest" in page.text
        assert "created" in page.text and "ab" * 16 in page.text
        assert "no span files" in page.text  # this gateway keeps no trace directory
        assert "<script>alert(1)" not in page.text and "&lt;script&gt;" in page.text


async def test_templates_nodes_and_events(stack: Stack) -> None:
    async with client(stack) as http:
        await login(http)
        nodes = await http.get("/dashboard/nodes")
        assert NODE_ID in nodes.text and 'aria-current=page' in nodes.text
        templates = await http.get("/dashboard/templates")
        assert templates.status_code == 200 and "<caption>" in templates.text
        assert (await http.get("/dashboard/templates/nope")).status_code == 404


async def test_events_are_scoped_to_the_key(stack: Stack) -> None:
    store = stack.gateway.event_store
    assert store is not None
    async with client(stack) as http:
        made = await http.post("/admin/keys", headers=AUTH, json={"name": "team"})
        key, key_id = made.json()["key"], made.json()["keyID"]
        await store.record(  # type: ignore[attr-defined]
            c.SandboxEvent(sandbox_id="isb-mine", type=c.SANDBOX_EVENT_TYPE_CREATED,
                           owner_key_id=key_id),
            c.SandboxEvent(sandbox_id="isb-theirs", type=c.SANDBOX_EVENT_TYPE_CREATED,
                           owner_key_id="someone-else"))
        await login(http, key)
        page = await http.get("/dashboard/events")
        assert "isb-mine" in page.text and "isb-theirs" not in page.text
    async with client(stack) as admin:
        await login(admin, API_KEY)
        page = await admin.get("/dashboard/events")
        assert "isb-mine" in page.text and "isb-theirs" in page.text


async def test_the_event_stream_sends_rendered_rows_as_they_happen(stack: Stack) -> None:
    store = stack.gateway.event_store
    assert store is not None
    async with client(stack) as http:
        await login(http)
        async with http.stream("GET", "/dashboard/events/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            assert await anext(lines) == ": connected"
            await store.record(c.SandboxEvent(  # type: ignore[attr-defined]
                sandbox_id="isb-live", type=c.SANDBOX_EVENT_TYPE_PAUSED, owner_key_id="admin"))
            data = ""
            while not data:
                line = await asyncio.wait_for(anext(lines), 10)
                data = line.removeprefix("data: ") if line.startswith("data: ") else ""
            assert "isb-live" in data and "paused" in data


async def test_only_our_own_script_is_loaded(stack: Stack) -> None:
    async with client(stack) as http:
        await login(http)
        script = await http.get("/dashboard/static/dashboard.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        page = await http.get("/dashboard/sandboxes")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources and all(s.startswith(("/dashboard/", "#")) for s in sources)
        assert '<a class="skip" href="#main">' in page.text and '<main id="main">' in page.text
        assert '<label for="f-metadata">' in page.text


async def test_five_hundred_sandboxes_stay_one_page_of_fifty(stack: Stack) -> None:
    """A training run's worth: the page carries 50 rows, and a filter is applied by the server
    over all 500 (the page's time is printed: `pytest -s` shows it)."""
    for i in range(500):
        record = c.SandboxRecord(sandbox_id=f"isb-{i:03d}", template_id="base", node_id=NODE_ID,
                                 state=c.SANDBOX_STATE_RUNNING, metadata={"group": str(i % 5)})
        record.started_at.FromNanoseconds(1_700_000_000_000_000_000 + i * 1_000_000_000)
        stack.view.sandbox_records[record.sandbox_id] = record
    async with client(stack) as http:
        await login(http)
        started = time.perf_counter()
        page = await http.get("/dashboard/sandboxes")
        took_ms = (time.perf_counter() - started) * 1000
        print(f"500 sandboxes: first page in {took_ms:.0f} ms, {len(page.content)} bytes")
        shown = ROW.findall(page.text)
        assert len(shown) == 50 and shown[0] == "isb-499"  # newest first
        group = await http.get("/dashboard/sandboxes/rows", params={"metadata": "group=3"})
        in_group = ROW.findall(group.text)
        assert len(in_group) == 50 and all(int(s[4:]) % 5 == 3 for s in in_group)
        assert took_ms < 10_000


async def test_a_dead_sandboxs_page_says_why_it_died(stack: Stack) -> None:
    store = stack.gateway.event_store
    assert store is not None
    certificate = c.DeathCertificate(sandbox_id="isb-dead", cause=c.DEATH_CAUSE_VMM_CRASH,
                                     detail="qemu killed by signal 9", owner_key_id="admin")
    await store.certify(certificate, c.SandboxEvent(  # type: ignore[attr-defined]
        sandbox_id="isb-dead", type=c.SANDBOX_EVENT_TYPE_DIED, owner_key_id="admin"))
    async with client(stack) as http:
        await login(http)
        page = await http.get("/dashboard/sandboxes/isb-dead")
        assert page.status_code == 404
        assert "qemu killed by signal 9" in page.text and 'role="alert"' in page.text


async def test_a_reconnecting_stream_replays_what_it_missed(stack: Stack) -> None:
    store = stack.gateway.event_store
    assert store is not None
    [seen] = await store.record(c.SandboxEvent(  # type: ignore[attr-defined]
        sandbox_id="isb-seen", type=c.SANDBOX_EVENT_TYPE_CREATED, owner_key_id="admin"))
    [missed] = await store.record(c.SandboxEvent(  # type: ignore[attr-defined]
        sandbox_id="isb-missed", type=c.SANDBOX_EVENT_TYPE_KILLED, owner_key_id="admin"))
    async with client(stack) as http:
        await login(http)
        for last, expected in ((seen.event_id, "isb-missed"), ("not-an-id", None)):
            headers = {"Last-Event-ID": last}
            async with http.stream("GET", "/dashboard/events/stream", headers=headers) as stream:
                lines = stream.aiter_lines()
                assert await anext(lines) == ": connected"
                if expected is None:  # a stale or malformed id: from now on, no error
                    continue
                sent = [line async for line in _first_lines(lines, 2)]
                assert sent[0] == f"id: {missed.event_id}" and expected in sent[1]


async def _first_lines(lines: AsyncIterator[str], count: int) -> AsyncIterator[str]:
    """The stream's next `count` lines that are not blank (SSE's separators)."""
    while count:
        line = await asyncio.wait_for(anext(lines), 10)
        if line:
            count -= 1
            yield line
