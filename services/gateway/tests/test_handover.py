"""Paused sandboxes whose node is gone: visible, moved to a live node when used, killed without
a move; lost ones say so. Against the fake scheduler and node agent."""

from __future__ import annotations

import asyncio

import httpx

from aenv.cluster.v1 import cluster_pb2

from .conftest import API_KEY, Stack
from .fakes import NODE_ID

AUTH = {"X-API-Key": API_KEY}


def _orphan(stack: Stack, sandbox_id: str, *, stored: bool = True,
            state: int = cluster_pb2.SANDBOX_STATE_PAUSED) -> None:
    stack.view.sandbox_records[sandbox_id] = cluster_pb2.SandboxRecord(
        sandbox_id=sandbox_id, node_id="gone-node", template_id="snap-deleted",
        base_template_id="base", state=state,  # type: ignore[arg-type]
        paused_image=f"paused-{sandbox_id}-1" if stored else "",
        resources=cluster_pb2.Resources(vcpus=2, memory_mib=512),
    )


def _client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, timeout=10, headers=AUTH)


async def test_a_stored_paused_sandbox_is_visible_and_moved_once_when_resumed(
    stack: Stack,
) -> None:
    _orphan(stack, "sbx-moved")
    async with _client(stack) as http:
        info = await http.get("/sandboxes/sbx-moved")
        assert info.status_code == 200 and info.json()["state"] == "paused"
        listed = (await http.get("/v2/sandboxes?state=paused")).json()
        assert [s["sandboxID"] for s in listed] == ["sbx-moved"]
        assert (await http.post("/sandboxes/sbx-moved/pause", json={})).status_code == 409
        assert (await http.get("/sandboxes/sbx-moved/metrics")).json() == []

        calls_before = stack.scheduler.calls
        first, second = await asyncio.gather(
            http.post("/sandboxes/sbx-moved/connect", json={"timeout": 60}),
            http.post("/sandboxes/sbx-moved/connect", json={"timeout": 60}),
        )
        assert {first.status_code, second.status_code} <= {200, 201}, (first.text, second.text)
        assert 201 in (first.status_code, second.status_code)
        # One placement (by the base template: the snapshot it came from is gone), one move.
        assert stack.scheduler.calls == calls_before + 1
        assert stack.nodeagent.takeovers == [("sbx-moved", False)]
        record = stack.view.sandbox_records["sbx-moved"]
        assert record.node_id == NODE_ID and record.state == cluster_pb2.SANDBOX_STATE_RUNNING


async def test_a_stored_paused_sandbox_is_killed_without_a_move(stack: Stack) -> None:
    _orphan(stack, "sbx-killed")
    async with _client(stack) as http:
        killed = await http.delete("/sandboxes/sbx-killed")
        assert killed.status_code == 204, killed.text
        assert stack.nodeagent.takeovers == [("sbx-killed", True)]
        assert "sbx-killed" not in stack.view.sandbox_records
        assert (await http.get("/sandboxes/sbx-killed")).status_code == 404


async def test_a_sandbox_lost_with_its_node_says_so(stack: Stack) -> None:
    _orphan(stack, "sbx-unstored", stored=False, state=cluster_pb2.SANDBOX_STATE_LOST)
    async with _client(stack) as http:
        for answer in (await http.get("/sandboxes/sbx-unstored"),
                       await http.post("/sandboxes/sbx-unstored/connect", json={"timeout": 60})):
            assert answer.status_code == 404
            assert "lost with its node" in answer.json()["message"]
        assert stack.nodeagent.takeovers == []
