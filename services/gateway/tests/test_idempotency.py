"""Idempotent creates over a fake key store: the same caller's key answers its sandbox, another
caller's does not, a key another replica holds is waited for, a failed or abandoned create frees
the key, and a sandbox is answered even when the store cannot keep its key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unavailable
from aenv_gateway.core.idempotency import (
    Claim,
    Held,
    IdempotentCreates,
    InMemoryKeyClaims,
    scoped_name,
)

Record = cluster_pb2.SandboxRecord


class Creates:
    """A create that makes `sb-<n>`, and can be held open or fail."""

    def __init__(self) -> None:
        self.made = 0
        self.gate: asyncio.Event | None = None
        self.failure: Exception | None = None

    async def __call__(self) -> Record:
        self.made += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return Record(sandbox_id=f"sb-{self.made}")


class ScriptedClaims:
    """A store whose claims answer a script first (what other replicas did), then as memory."""

    def __init__(self, script: list[Claim], *, finish_fails: bool = False) -> None:
        self.script = script
        self.memory = InMemoryKeyClaims(600)
        self.finish_fails = finish_fails
        self.released: list[Held] = []

    async def claim(self, name: str) -> Claim:
        if self.script:
            return self.script.pop(0)
        return await self.memory.claim(name)

    async def finish(self, held: Held, record: Record) -> None:
        if self.finish_fails:
            raise Unavailable("etcd unavailable")
        await self.memory.finish(held, record)

    async def release(self, held: Held) -> None:
        self.released.append(held)
        await self.memory.release(held)


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)


def _runner(claims: ScriptedClaims | InMemoryKeyClaims) -> IdempotentCreates:
    return IdempotentCreates(claims, poll_s=0.01, sleep=_no_sleep)


async def test_the_same_callers_key_answers_the_first_sandbox() -> None:
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600))
    first = await runner.run("admin", "k", creates)
    again = await runner.run("admin", "k", creates)
    assert first.sandbox_id == again.sandbox_id == "sb-1" and creates.made == 1


async def test_another_callers_key_of_the_same_name_is_its_own() -> None:
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600))
    mine = await runner.run("admin", "k", creates)
    theirs = await runner.run("0a1b2c", "k", creates)
    assert mine.sandbox_id != theirs.sandbox_id and creates.made == 2


async def test_concurrent_calls_share_the_create_in_flight() -> None:
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600))
    creates.gate = asyncio.Event()
    calls = [asyncio.ensure_future(runner.run("admin", "k", creates)) for _ in range(3)]
    await asyncio.sleep(0.05)
    creates.gate.set()
    records = await asyncio.wait_for(asyncio.gather(*calls), 5)
    assert {r.sandbox_id for r in records} == {"sb-1"} and creates.made == 1


async def test_a_failed_create_fails_its_waiters_and_frees_the_key() -> None:
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600))
    creates.gate, creates.failure = asyncio.Event(), Unavailable("no node answered")
    calls = [asyncio.ensure_future(runner.run("admin", "k", creates)) for _ in range(2)]
    await asyncio.sleep(0.05)
    creates.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results) and creates.made == 1
    creates.failure = None
    assert (await runner.run("admin", "k", creates)).sandbox_id == "sb-2"


async def test_a_cancelled_owner_leaves_its_waiter_to_create() -> None:
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600))
    creates.gate = asyncio.Event()
    owner = asyncio.ensure_future(runner.run("admin", "k", creates))
    await asyncio.sleep(0.05)
    waiter = asyncio.ensure_future(runner.run("admin", "k", creates))
    await asyncio.sleep(0.05)
    owner.cancel()
    await asyncio.sleep(0.05)
    creates.gate.set()
    assert (await asyncio.wait_for(waiter, 5)).sandbox_id == "sb-2"
    assert owner.cancelled() and creates.made == 2


async def test_a_key_another_replica_holds_answers_its_sandbox() -> None:
    theirs = Record(sandbox_id="sb-theirs")
    claims = ScriptedClaims([*([None] * 6), theirs])
    creates, waits = Creates(), list[float]()

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    runner = IdempotentCreates(claims, poll_s=0.05, max_poll_s=1.0, sleep=sleep)
    assert (await runner.run("admin", "k", creates)) == theirs
    assert creates.made == 0
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]  # asked again sooner than later


async def test_a_key_freed_by_another_replica_is_created_here() -> None:
    # Held elsewhere twice, then free (that create failed, or its gateway died).
    claims, creates = ScriptedClaims([None, None]), Creates()
    assert (await _runner(claims).run("admin", "k", creates)).sandbox_id == "sb-1"
    assert (await claims.memory.claim(scoped_name("admin", "k"))) == Record(sandbox_id="sb-1")


async def test_the_claim_of_a_failed_create_is_released() -> None:
    claims, creates = ScriptedClaims([]), Creates()
    creates.failure = Unavailable("no node answered")
    with pytest.raises(Unavailable):
        await _runner(claims).run("admin", "k", creates)
    assert [h.name for h in claims.released] == ["admin.k"]


async def test_a_sandbox_is_answered_when_its_key_cannot_be_kept() -> None:
    claims, creates = ScriptedClaims([], finish_fails=True), Creates()
    assert (await _runner(claims).run("admin", "k", creates)).sandbox_id == "sb-1"


async def test_an_unreachable_store_creates_nothing() -> None:
    class Down(ScriptedClaims):
        async def claim(self, name: str) -> Claim:
            raise Unavailable("etcd unavailable")

    creates = Creates()
    with pytest.raises(Unavailable):
        await _runner(Down([])).run("admin", "k", creates)
    assert creates.made == 0


async def test_a_kept_key_expires_after_the_ttl() -> None:
    now = [0.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    creates, runner = Creates(), _runner(InMemoryKeyClaims(600, clock))
    await runner.run("admin", "k", creates)
    now[0] = 599.0
    assert (await runner.run("admin", "k", creates)).sandbox_id == "sb-1"
    now[0] = 601.0
    assert (await runner.run("admin", "k", creates)).sandbox_id == "sb-2"


def test_scoped_names_keep_callers_and_batch_items_apart() -> None:
    names = {scoped_name(c, k) for c in ("admin", "0a1b") for k in ("k", "k/0", "k-0", "k/1")}
    assert len(names) == 8 and all("/" not in n for n in names)
