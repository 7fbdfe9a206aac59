"""A create the node agent did not answer is sent again with the same id, and one that still
fails has its sandbox killed once the node agent answers (creates.py), over a scripted node
agent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import (
    Conflict,
    DeadlineExceeded,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.core.creates import CreateRetryPolicy, NodeCreates

ADDRESS = "node:1"
POLICY = CreateRetryPolicy(retry_s=5.0, interval_s=1.0, abandon_s=10.0)


class ScriptedNode:
    """Answers each create, then each kill, with the next of its scripted outcomes (an error
    is raised; anything else answers); the last outcome repeats."""

    def __init__(self, creates: list[object], kills: list[object] | None = None) -> None:
        self._creates = _repeat_last(creates)
        self._kills = _repeat_last(kills or [None])
        self.created: list[cluster_pb2.SandboxSpec] = []
        self.killed: list[str] = []

    async def create(
        self, address: str, spec: cluster_pb2.SandboxSpec
    ) -> cluster_pb2.SandboxRecord:
        self.created.append(spec)
        outcome = next(self._creates)
        if isinstance(outcome, BaseException):
            raise outcome
        return cluster_pb2.SandboxRecord(sandbox_id=spec.sandbox_id, node_id=address)

    async def kill(self, address: str, sandbox_id: str) -> None:
        self.killed.append(sandbox_id)
        outcome = next(self._kills)
        if isinstance(outcome, BaseException):
            raise outcome


def _repeat_last(items: list[object]) -> Iterator[object]:
    yield from items
    while True:
        yield items[-1]


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def creates_on(node: ScriptedNode, time: VirtualTime) -> NodeCreates:
    return NodeCreates(cast(NodeAgentClients, node), POLICY, clock=time.clock, sleep=time.sleep)


SPEC = cluster_pb2.SandboxSpec(sandbox_id="sbx1", template_id="base", envd_access_token="t")


async def test_an_answered_create_is_sent_once() -> None:
    node, time = ScriptedNode([None]), VirtualTime()
    record = await creates_on(node, time).create(ADDRESS, SPEC)
    assert record.sandbox_id == "sbx1" and len(node.created) == 1 and node.killed == []


async def test_an_unanswered_create_is_sent_again_with_the_same_spec() -> None:
    node = ScriptedNode([Unavailable("failed to connect"), Unavailable("restarting"),
                         DeadlineExceeded("slow"), Conflict("being made"), None])
    time = VirtualTime()
    record = await creates_on(node, time).create(ADDRESS, SPEC)
    assert record.sandbox_id == "sbx1"
    assert node.created == [SPEC] * 5  # the id (and token) is the create's idempotency key
    assert node.killed == []


async def test_a_create_never_answered_fails_and_its_sandbox_is_killed_later() -> None:
    node = ScriptedNode([Unavailable("down")], kills=[Unavailable("down"), Unavailable("down"),
                                                      None])
    time = VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(Unavailable, match="did not answer the create"):
        await creates.create(ADDRESS, SPEC)
    assert time.now >= POLICY.retry_s
    await creates.settled()
    assert node.killed == ["sbx1"] * 3  # until the node agent answered


async def test_a_kill_that_finds_nothing_ends_the_abandon() -> None:
    node, time = ScriptedNode([Unavailable("down")], kills=[NotFound("no such sandbox")]), \
        VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(Unavailable):
        await creates.create(ADDRESS, SPEC)
    await creates.settled()
    assert node.killed == ["sbx1"]


async def test_the_kill_of_an_abandoned_create_gives_up_after_its_window() -> None:
    node, time = ScriptedNode([Unavailable("down")], kills=[Unavailable("down")]), VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(Unavailable):
        await creates.create(ADDRESS, SPEC)
    await creates.settled()
    assert 1 < len(node.killed) <= POLICY.abandon_s / POLICY.interval_s + 1


async def test_a_refused_create_is_not_sent_again_nor_killed() -> None:
    node, time = ScriptedNode([ResourceExhausted("full")]), VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(ResourceExhausted):
        await creates.create(ADDRESS, SPEC)
    await creates.settled()
    assert len(node.created) == 1 and node.killed == []


async def test_a_create_past_its_deadline_is_killed_not_sent_again() -> None:
    # Cancelled on the node, but it may have published first; the client waited long enough.
    node, time = ScriptedNode([DeadlineExceeded("late")]), VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(DeadlineExceeded):
        await creates.create(ADDRESS, SPEC)
    await creates.settled()
    assert len(node.created) == 1 and node.killed == ["sbx1"]


async def test_a_create_failing_definitely_after_an_unknown_outcome_is_killed() -> None:
    # The node came back and refused it: the first attempt may still have made it (published
    # as the connection broke), so it is killed all the same.
    node, time = ScriptedNode([Unavailable("down"), ResourceExhausted("full")]), \
        VirtualTime()
    creates = creates_on(node, time)
    with pytest.raises(ResourceExhausted):
        await creates.create(ADDRESS, SPEC)
    await creates.settled()
    assert node.killed == ["sbx1"]


async def test_a_create_cancelled_in_flight_is_killed() -> None:
    gate = asyncio.Event()

    class Hanging(ScriptedNode):
        async def create(
            self, address: str, spec: cluster_pb2.SandboxSpec
        ) -> cluster_pb2.SandboxRecord:
            await gate.wait()
            raise AssertionError("never answered")

    node, time = Hanging([None]), VirtualTime()
    creates = creates_on(node, time)
    task = asyncio.ensure_future(creates.create(ADDRESS, SPEC))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await creates.settled()
    assert node.killed == ["sbx1"]


async def test_a_later_attempt_never_outlasts_the_window() -> None:
    # Real time: a node agent back but hanging is given up on when the window ends.
    gate = asyncio.Event()

    class Hanging(ScriptedNode):
        async def create(
            self, address: str, spec: cluster_pb2.SandboxSpec
        ) -> cluster_pb2.SandboxRecord:
            self.created.append(spec)
            if len(self.created) == 1:
                raise Unavailable("restarting")
            await gate.wait()
            raise AssertionError("never answered")

    node = Hanging([None])
    creates = NodeCreates(cast(NodeAgentClients, node),
                          CreateRetryPolicy(retry_s=0.3, interval_s=0.05, abandon_s=1.0))
    async with asyncio.timeout(5):
        with pytest.raises(Unavailable, match="did not answer"):
            await creates.create(ADDRESS, SPEC)
        await creates.settled()
    assert len(node.created) == 2 and node.killed == ["sbx1"]
