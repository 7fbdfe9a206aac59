"""The events API over the in-process gateway: E2B's list routes (query, JSON, who sees what),
the SSE stream (ids, heartbeat, resume, error), the gRPC list and watch through aenv_client, and
the death certificate in every answer about a dead sandbox (REST, gRPC, data plane, both SDKs)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_client import GatewayClient, OutOfRange, SandboxDied
from aenv_common.errors import Unavailable
from aenv_gateway.core.events.memory import InMemoryEventStore

from .conftest import API_KEY, Stack, running_stack

ADMIN = {"X-API-Key": API_KEY}
CREATED, READY, PAUSED, DIED, LOST = (
    c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_READY, c.SANDBOX_EVENT_TYPE_PAUSED,
    c.SANDBOX_EVENT_TYPE_DIED, c.SANDBOX_EVENT_TYPE_LOST)


def store_of(stack: Stack) -> InMemoryEventStore:
    return cast(InMemoryEventStore, stack.gateway.event_store)


def event(sandbox: str, type_: int, owner: str, **fields: Any) -> c.SandboxEvent:
    return c.SandboxEvent(sandbox_id=sandbox, type=type_, owner_key_id=owner,  # type: ignore[arg-type]
                          template_id="base", **fields)


async def new_key(http: httpx.AsyncClient) -> tuple[str, str]:
    created = await http.post("/admin/keys", headers=ADMIN, json={"name": "trainer"})
    assert created.status_code == 201, created.text
    return created.json()["keyID"], created.json()["key"]


async def test_e2b_list_routes(stack: Stack) -> None:
    store = store_of(stack)
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        key_id, key = await new_key(http)
        mine = {"X-API-Key": key}
        for e in (event("a", CREATED, key_id, metadata={"rollout_id": "r1"}),
                  event("a", READY, key_id), event("a", PAUSED, key_id),
                  event("b", CREATED, "admin"), event("a", LOST, key_id)):
            await store.record(e)
        listed = await http.get("/events/sandboxes", headers=mine)
        assert listed.status_code == 200, listed.text
        body = listed.json()
        # Newest first; ready and lost have no E2B name and stay off E2B's routes.
        assert [(e["sandboxId"], e["type"]) for e in body] == [
            ("a", "sandbox.lifecycle.paused"), ("a", "sandbox.lifecycle.created")]
        assert body[1]["eventData"]["sandbox_metadata"] == {"rollout_id": "r1"}
        assert body[1]["version"] == "v2" and body[1]["sandboxTeamId"] == key_id
        everyone = (await http.get("/events/sandboxes", headers=ADMIN)).json()
        assert {e["sandboxId"] for e in everyone} == {"a", "b"}
        one = await http.get("/events/sandboxes/a", headers=mine,
                             params={"orderAsc": "true", "limit": 1, "offset": 1})
        assert [e["type"] for e in one.json()] == ["sandbox.lifecycle.paused"]
        typed = await http.get("/events/sandboxes", headers=mine, params=[
            ("types", "sandbox.lifecycle.created"), ("types", "sandbox.lifecycle.killed")])
        assert [e["type"] for e in typed.json()] == ["sandbox.lifecycle.created"]
        assert (await http.get("/events/sandboxes/b", headers=mine)).json() == []
        for bad in ({"limit": "0"}, {"limit": "101"}, {"offset": "x"},
                    {"orderAsc": "maybe"}, {"types": "sandbox.lifecycle.ready"}):
            refused = await http.get("/events/sandboxes", headers=mine, params=bad)
            assert refused.status_code == 400 and refused.json()["code"] == 400, bad
        assert (await http.get("/events/sandboxes")).status_code == 401


async def sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        yield line


async def next_event(lines: AsyncIterator[str]) -> tuple[str, dict[str, Any]]:
    """The next SSE event's id (or its `event:` name) and data."""
    fields: dict[str, str] = {}
    async for line in lines:
        if line == "" and fields:
            return fields.get("id") or fields.get("event", ""), json.loads(fields["data"])
        if line and not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    raise AssertionError("the stream ended")


async def test_sse_stream_ids_heartbeat_resume_and_error() -> None:
    async with running_stack(event_heartbeat_s=0.2) as stack, httpx.AsyncClient(
            base_url=stack.url, timeout=10) as http:
        store = store_of(stack)
        key_id, key = await new_key(http)
        headers = {"X-API-Key": key}
        params = {"types": ["created", "died"], "metadata": "rollout_id=r1"}
        async with http.stream("GET", "/events/sandboxes/stream", headers=headers,
                               params=params) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            raw = response.aiter_raw()
            assert b": connected" in await anext(raw)
            await store.record(event("a", CREATED, key_id, metadata={"rollout_id": "r1"}))
            await store.record(event("z", CREATED, key_id))  # not r1's
            await store.record(event("a", DIED, key_id, metadata={"rollout_id": "r1"},
                                     cause=c.DEATH_CAUSE_GUEST_OOM))
            text = b""
            while text.count(b"id: ") < 2:
                text += await anext(raw)
            first_id = text.split(b"id: ")[1].split(b"\n")[0].decode()
            assert b'"cause": "guest_oom"' in text and b'"z"' not in text
            # Idle: a comment every heartbeat keeps it open.
            assert b": keep-alive" in await asyncio.wait_for(anext(raw), 2)
        # Resumed after the first: the second (and nothing else) again.
        resume = {**headers, "Last-Event-ID": first_id}
        async with http.stream("GET", "/events/sandboxes/stream", headers=resume,
                               params=params) as response:
            lines = sse_lines(response)
            _, data = await next_event(lines)
            assert data["type"] == "died" and data["sandboxId"] == "a"
            await store.cut(Unavailable("etcd restarted"))
            name, error = await next_event(lines)
            assert name == "error" and error["code"] == 503
        stale = await http.get("/events/sandboxes/stream", headers=headers,
                               params={"after": "00000000000000000001-00000000"})
        assert stale.status_code == 410 and stale.json()["code"] == 410


async def test_native_list_and_watch(stack: Stack) -> None:
    store = store_of(stack)
    target = f"127.0.0.1:{stack.gateway.grpc_port}"
    async with GatewayClient(target, API_KEY) as client:
        record = await client.create_sandbox("base", metadata={"rollout_id": "r9"})
        sid = record.sandbox_id
        watched: list[c.SandboxEvent] = []

        async def watch() -> None:
            async for e in client.watch_events(metadata={"rollout_id": "r9"}):
                watched.append(e)
                if e.type == DIED:
                    return

        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(0.2)
        for type_ in (CREATED, READY, PAUSED, DIED):
            await store.record(event(sid, type_, "admin", metadata={"rollout_id": "r9"}))
        await asyncio.wait_for(watcher, 5)
        assert [e.type for e in watched] == [CREATED, READY, PAUSED, DIED]
        listed = await client.list_events(sandbox_id=sid, types=[READY, DIED],
                                          order_ascending=True)
        assert [e.type for e in listed] == [READY, DIED]
        # Resumed after the second: the rest, in order.
        resumed = []
        async for e in client.watch_events(after_event_id=watched[1].event_id):
            resumed.append(e.type)
            if len(resumed) == 2:
                break
        assert resumed == [PAUSED, DIED]
        store.forget(watched[0].event_id)
        with pytest.raises(OutOfRange):
            async for _ in client.watch_events(after_event_id=watched[0].event_id):
                pass


async def test_a_cut_watch_resumes_after_its_last_event(stack: Stack) -> None:
    store = store_of(stack)
    async with GatewayClient(f"127.0.0.1:{stack.gateway.grpc_port}", API_KEY) as client:
        got: list[str] = []
        first = asyncio.Event()

        async def watch() -> None:
            async for e in client.watch_events():
                got.append(e.sandbox_id)
                first.set()
                if len(got) == 3:
                    return

        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(0.2)
        await store.record(event("one", CREATED, "admin"))
        await asyncio.wait_for(first.wait(), 5)
        await store.cut(Unavailable("etcd restarted"))  # the stream is cut
        await store.record(event("two", CREATED, "admin"))  # while it reconnects
        await asyncio.sleep(0.3)
        await store.record(event("three", CREATED, "admin"))
        await asyncio.wait_for(watcher, 10)
        assert got == ["one", "two", "three"]


async def died(stack: Stack, sid: str) -> None:
    """What the node agent does when a sandbox's VMM dies: its record goes, its certificate
    and DIED event are written."""
    stack.view.sandbox_records.pop(sid, None)
    stack.gateway.directory.forget(sid)
    await store_of(stack).certify(
        c.DeathCertificate(sandbox_id=sid, cause=c.DEATH_CAUSE_VMM_CRASH,
                           detail="qemu killed by signal 9"),
        event(sid, DIED, "admin", cause=c.DEATH_CAUSE_VMM_CRASH))


async def test_every_answer_about_a_dead_sandbox_carries_its_certificate(stack: Stack) -> None:
    words = "died: vmm_crash (qemu killed by signal 9)"
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await http.post("/sandboxes", headers=ADMIN, json={"templateID": "base"})
        sid = created.json()["sandboxID"]
        await died(stack, sid)
        for method, path in (("GET", f"/sandboxes/{sid}"), ("DELETE", f"/sandboxes/{sid}"),
                             ("POST", f"/sandboxes/{sid}/timeout"),
                             ("POST", f"/sandboxes/{sid}/pause"),
                             ("POST", f"/sandboxes/{sid}/connect"),
                             ("GET", f"/sandboxes/{sid}/metrics")):
            answer = await http.request(method, path, headers=ADMIN, json={"timeout": 10})
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json() == {"code": 404, "message": f"sandbox {sid} {words}"}, path
        data = await http.get("/health", headers={"E2b-Sandbox-Id": sid})
        assert data.status_code == 502
        assert data.json()["message"] == f"The sandbox was not found: sandbox {sid} {words}"
        # A sandbox killed by its owner has no certificate: a plain 404.
        other = (await http.post("/sandboxes", headers=ADMIN, json={"templateID": "base"}))
        other_id = other.json()["sandboxID"]
        await http.delete(f"/sandboxes/{other_id}", headers=ADMIN)
        plain = await http.get(f"/sandboxes/{other_id}", headers=ADMIN)
        assert plain.status_code == 404 and "died" not in plain.json()["message"]

    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.GetSandbox(gateway_pb2.GetSandboxRequest(sandbox_id=sid),
                                  metadata=(("x-api-key", API_KEY),))
        assert raw.value.code() == grpc.StatusCode.NOT_FOUND
        assert raw.value.details() == f"sandbox {sid} {words}"
        assert ("aenv-death-cause", "vmm_crash") in list(raw.value.trailing_metadata() or ())

    # The native client: SandboxDied with the cause, for any call, its own sandboxes or not.
    async with GatewayClient(f"127.0.0.1:{stack.gateway.grpc_port}", API_KEY) as client:
        calls = (lambda: client.get_sandbox(sid), lambda: client.kill_sandbox(sid),
                 lambda: client.pause_sandbox(sid), lambda: client.set_timeout(sid, 30),
                 lambda: client.run(sid, "true"), lambda: client.fork_sandbox(sid),
                 lambda: client.get_file(sid, "/etc/hostname"))
        for call in calls:
            with pytest.raises(SandboxDied) as gone:
                await call()
            assert gone.value.cause == "vmm_crash", call
            assert gone.value.detail == "qemu killed by signal 9"


@pytest.mark.sdk
async def test_the_e2b_sdk_on_a_dead_sandbox(e2b_env: Stack) -> None:
    """What the official SDK makes of the answers: its data-plane errors carry the message (and
    so the cause); its control-plane 404s are its own words (it drops the body's message)."""
    from e2b import AsyncSandbox
    from e2b.exceptions import SandboxNotFoundException, SandboxNotRunningException

    sbx = await AsyncSandbox.create("base")
    await died(e2b_env, sbx.sandbox_id)
    with pytest.raises(SandboxNotRunningException) as run:
        await sbx.commands.run("true")
    assert "vmm_crash" in str(run.value)
    with pytest.raises(SandboxNotRunningException) as read:
        await sbx.files.read("/etc/hostname")
    assert "vmm_crash" in str(read.value)
    assert await sbx.is_running() is False
    for call in (AsyncSandbox.connect(sbx.sandbox_id), sbx.set_timeout(30),
                 AsyncSandbox.get_info(sbx.sandbox_id)):
        with pytest.raises(SandboxNotFoundException):
            await call
    assert await AsyncSandbox.kill(sbx.sandbox_id) is False


async def test_the_gateway_stops_with_open_streams(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http, http.stream(
            "GET", "/events/sandboxes/stream", headers=ADMIN) as response:
        lines = sse_lines(response)
        assert stack.gateway.event_hub is not None
        await stack.gateway.event_hub.stop()
        name, error = await next_event(lines)
        assert name == "error" and error["code"] == 503
