"""Snapshots (list, delete, create from), reset and auto-resume through the REST and gRPC edges,
against the fake scheduler and node agent."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}
MD = (("x-api-key", API_KEY),)


async def _client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, timeout=10)


async def _sandbox(http: httpx.AsyncClient, **body: object) -> str:
    created = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base", **body})
    assert created.status_code == 201, created.text
    return str(created.json()["sandboxID"])


def _snapshot_record(stack: Stack, snapshot_id: str, **fields: object) -> None:
    stack.view.snapshot_records[snapshot_id] = cluster_pb2.SnapshotRecord(
        snapshot_id=snapshot_id, node_id="node1", template_id="base", **fields  # type: ignore[arg-type]
    )


async def test_snapshots_listed_filtered_paginated_and_deleted(stack: Stack) -> None:
    async with await _client(stack) as http:
        a, b = await _sandbox(http), await _sandbox(http)
        for sid, body in ((a, {"name": "one"}), (a, {}), (b, {"name": "two"})):
            r = await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH, json=body)
            assert r.status_code == 201
        everything = (await http.get("/snapshots", headers=AUTH)).json()
        assert {s["snapshotID"] for s in everything} == {
            "aenv/one:default", "snap-2:default", "aenv/two:default"}
        assert {"snapshotID": "snap-2:default", "names": []} in everything  # unnamed: its id
        assert {"snapshotID": "aenv/two:default", "names": ["aenv/two"]} in everything
        of_a = (await http.get(f"/snapshots?sandboxID={a}", headers=AUTH)).json()
        assert sorted(s["snapshotID"] for s in of_a) == ["aenv/one:default", "snap-2:default"]
        for name in ("two", "aenv/two", "two:default", "TWO"):
            named = (await http.get(f"/snapshots?name={name}", headers=AUTH)).json()
            assert named == [{"snapshotID": "aenv/two:default", "names": ["aenv/two"]}], name
        for name in ("two:v9", "nothing", "snap-2:v1"):
            assert (await http.get(f"/snapshots?name={name}", headers=AUTH)).json() == []
        by_id = (await http.get("/snapshots?name=snap-2", headers=AUTH)).json()
        assert by_id == [{"snapshotID": "snap-2:default", "names": []}]

        first = await http.get("/snapshots?limit=2", headers=AUTH)
        token = first.headers["X-Next-Token"]
        rest = await http.get(f"/snapshots?limit=2&nextToken={token}", headers=AUTH)
        assert "X-Next-Token" not in rest.headers
        paged = [s["snapshotID"] for s in first.json() + rest.json()]
        assert len(paged) == 3 and set(paged) == {s["snapshotID"] for s in everything}

        bad = await http.get("/snapshots?limit=0", headers=AUTH)
        assert bad.status_code == 400 and bad.json()["code"] == 400
        bad_token = await http.get("/snapshots?nextToken=%%%", headers=AUTH)
        assert bad_token.status_code == 400

        assert (await http.delete("/templates/snap-2%3Adefault", headers=AUTH)).status_code == 204
        again = await http.delete("/templates/snap-2%3Adefault", headers=AUTH)
        assert again.status_code == 404 and again.json() == {
            "code": 404, "message": "template 'snap-2:default' not found"}
        listed = (await http.get("/snapshots", headers=AUTH)).json()
        assert {s["snapshotID"] for s in listed} == {"aenv/one:default", "aenv/two:default"}


async def test_delete_decodes_the_raw_segment_and_reaches_the_holder(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _sandbox(http)
        made = await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH,
                               json={"name": "aenv/task:v1"})
        assert made.json() == {"snapshotID": "aenv/task:v1", "names": ["aenv/task"]}
        r = await http.delete("/templates/aenv%2Ftask%3Av1", headers=AUTH)
        assert r.status_code == 204
        assert stack.view.snapshot_records == {}


async def test_delete_of_snapshot_on_a_vanished_node_is_503(stack: Stack) -> None:
    stack.view.snapshot_records["snap-x"] = cluster_pb2.SnapshotRecord(
        snapshot_id="snap-x", node_id="gone")
    async with await _client(stack) as http:
        r = await http.delete("/templates/snap-x", headers=AUTH)
        assert r.status_code == 503 and "gone" in r.json()["message"]


async def test_create_from_snapshot_passes_its_id_as_template(stack: Stack) -> None:
    stack.scheduler.templates.add("snap-9")
    async with await _client(stack) as http:
        sid = await _sandbox(http, templateID="snap-9")
    assert stack.nodeagent.specs[-1].template_id == "snap-9"
    assert stack.view.sandbox_records[sid].template_id == "snap-9"


async def test_reset_rest_extension(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _sandbox(http)
        await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH, json={})
        r = await http.post(f"/sandboxes/{sid}/reset", headers=AUTH, json={"snapshotID": "snap-1"})
        assert r.status_code == 200 and r.json()["sandboxID"] == sid
        assert stack.nodeagent.resets == [(sid, "snap-1")]
        missing = await http.post(f"/sandboxes/{sid}/reset", headers=AUTH, json={})
        assert missing.status_code == 400 and missing.json()["code"] == 400
        unknown = await http.post(f"/sandboxes/{sid}/reset", headers=AUTH,
                                  json={"snapshotID": "nope"})
        assert unknown.status_code == 404 and "nope" in unknown.json()["message"]
        await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        paused = await http.post(f"/sandboxes/{sid}/reset", headers=AUTH,
                                 json={"snapshotID": "snap-1"})
        assert paused.status_code == 409


async def test_grpc_lifecycle_calls(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        sid = (await stub.CreateSandbox(gateway_pb2.CreateSandboxRequest(template_id="base"),
                                        metadata=MD)).sandbox.sandbox_id
        snap = (await stub.CreateSnapshot(
            gateway_pb2.CreateSnapshotRequest(sandbox_id=sid, name="n"), metadata=MD)).snapshot
        assert snap.snapshot_id == "snap-1" and list(snap.names) == ["n"]
        assert snap.node_id == "node1" and snap.sandbox_id == sid
        listed = await stub.ListSnapshots(gateway_pb2.ListSnapshotsRequest(sandbox_id=sid),
                                          metadata=MD)
        assert [s.snapshot_id for s in listed.snapshots] == ["snap-1"]
        assert listed.next_page_token == ""

        reset = await stub.ResetSandbox(
            gateway_pb2.ResetSandboxRequest(sandbox_id=sid, snapshot_id="snap-1"), metadata=MD)
        assert reset.sandbox.sandbox_id == sid and stack.nodeagent.resets == [(sid, "snap-1")]

        forked = await stub.ForkSandbox(gateway_pb2.ForkSandboxRequest(sandbox_id=sid, count=2),
                                        metadata=MD)
        kinds = [r.WhichOneof("result") for r in forked.results]
        failed = forked.results[1].error
        assert kinds == ["sandbox", "error"]
        assert (failed.code, failed.status) == (503, "UNAVAILABLE")

        paused = await stub.PauseSandbox(gateway_pb2.PauseSandboxRequest(sandbox_id=sid),
                                         metadata=MD)
        assert paused.sandbox.state == cluster_pb2.SANDBOX_STATE_PAUSED
        with pytest.raises(grpc.aio.AioRpcError) as again:
            await stub.PauseSandbox(gateway_pb2.PauseSandboxRequest(sandbox_id=sid), metadata=MD)
        assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        resumed = await stub.ResumeSandbox(gateway_pb2.ResumeSandboxRequest(sandbox_id=sid),
                                           metadata=MD)
        assert resumed.resumed and resumed.sandbox.state == cluster_pb2.SANDBOX_STATE_RUNNING
        running = await stub.ResumeSandbox(gateway_pb2.ResumeSandboxRequest(sandbox_id=sid),
                                           metadata=MD)
        assert not running.resumed

        await stub.DeleteSnapshot(gateway_pb2.DeleteSnapshotRequest(snapshot_id="snap-1"),
                                  metadata=MD)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.DeleteSnapshot(gateway_pb2.DeleteSnapshotRequest(snapshot_id="snap-1"),
                                      metadata=MD)
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.ListSnapshots(gateway_pb2.ListSnapshotsRequest())
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _envd_headers(sid: str, stack: Stack) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(stack.guest_port)}


async def test_traffic_resumes_a_paused_auto_resume_sandbox_once(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _sandbox(http, autoPause=True, autoResume={"enabled": True})
        await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        stack.gateway.directory.forget(sid)  # drop the overlay: only the mirror says "paused"
        stack.gateway.directory.remember(stack.view.sandbox_records[sid])
        replies = await asyncio.gather(
            *(http.put("/echo", headers=_envd_headers(sid, stack), content=b"x")
              for _ in range(5)))
        assert [r.status_code for r in replies] == [200] * 5
        assert stack.nodeagent.resumes == 1
        assert stack.view.sandbox_records[sid].state == cluster_pb2.SANDBOX_STATE_RUNNING


async def test_traffic_to_a_paused_sandbox_without_auto_resume_is_502(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _sandbox(http)
        await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        r = await http.put("/echo", headers=_envd_headers(sid, stack), content=b"x")
        assert r.status_code == 502 and "was not found" in r.json()["message"]
        assert stack.nodeagent.resumes == 0


async def test_filesystem_only_modes_reach_the_node_agent(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _sandbox(http, autoPause=True, autoPauseMemory=False)
        assert stack.nodeagent.specs[-1].lifecycle.auto_pause_mode == (
            cluster_pb2.PAUSE_MODE_FILESYSTEM)
        snap = await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH,
                               json={"memory": False})
        assert snap.status_code == 201
        assert snap.json() == {"snapshotID": "snap-1:default", "names": []}
        assert not stack.view.snapshot_records["snap-1"].has_memory
        paused = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={"memory": False})
        assert paused.status_code == 204
        detail = (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
        assert detail["state"] == "paused" and detail["pauseMode"] == "filesystem"
        connected = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH,
                                    json={"memory": False})
        assert connected.status_code == 201
        bad = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={"memory": "no"})
        assert bad.status_code == 400
        assert (await http.post(f"/sandboxes/{sid}/pause", headers=AUTH)).status_code == 204
        assert (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()["pauseMode"] == "full"
        assert (await http.post(f"/sandboxes/{sid}/resume", headers=AUTH)).status_code == 201
    assert stack.nodeagent.reboots == [True, False]
