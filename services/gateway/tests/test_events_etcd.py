"""The gateway's event store and hub over a real etcd: the replay by revision, the watch, and
the resume seam — events written while a subscriber reconnects are neither missed nor repeated."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.errors import OutOfRange
from aenv_common.events import EventLog
from aenv_gateway.core.events.reader import EventFilter
from aenv_gateway.core.events.store import EtcdEventStore
from aenv_gateway.core.events.stream import EventHub
from aenv_gateway.keys.auth import ADMIN_KEY_ID

pytestmark = pytest.mark.etcd


def event(sandbox_id: str, kind: int = c.SANDBOX_EVENT_TYPE_CREATED) -> c.SandboxEvent:
    return c.SandboxEvent(sandbox_id=sandbox_id, type=kind, owner_key_id="k1")  # type: ignore[arg-type]


async def test_replay_is_by_commit_not_by_id(cluster_store: ClusterStore) -> None:
    log = EventLog(cluster_store, retention_s=600)
    store = EtcdEventStore(log)
    with pytest.raises(OutOfRange):
        await store.after("00000000000000000001-00000000")
    stamped_early = log.stamp(event("early"))  # its writer stamped it, then was slow to commit
    await log.record(event("first"))
    seen = (await store.events("events"))[-1]
    await log.record(stamped_early)
    await log.record(event("later"))
    replay = await store.after(seen.event_id)
    assert [r.event.sandbox_id for r in replay.events] == ["early", "later"]
    assert replay.events[0].revision < replay.events[1].revision <= replay.revision
    assert replay.revision == await store.revision()


async def test_watch_sees_commits_from_a_revision(cluster_store: ClusterStore) -> None:
    log = EventLog(cluster_store, retention_s=600)
    store = EtcdEventStore(log)
    start = await store.revision()
    await log.record(event("a"), event("b"))
    watch = store.watch(start + 1)
    got = [await anext(watch), await anext(watch)]
    await watch.aclose()
    assert [r.event.sandbox_id for r in got] == ["a", "b"]
    assert got[0].revision == got[1].revision  # one transaction


async def test_nothing_is_missed_or_repeated_across_reconnects(
    cluster_store: ClusterStore,
) -> None:
    log = EventLog(cluster_store, retention_s=600)
    hub = EventHub(EtcdEventStore(log))
    await hub.start()
    written: list[str] = []
    received: list[str] = []
    wanted = EventFilter(ADMIN_KEY_ID)

    started = asyncio.Event()

    async def write(count: int) -> None:
        for i in range(count):
            recorded = event(f"s{i}")
            await log.record(recorded)
            written.append(recorded.event_id)
            started.set()
            await asyncio.sleep(0.002)

    async def receive(count: int, after: str) -> str:
        async with hub.subscribe(wanted, after) as subscriber:
            for _ in range(count):
                got = await asyncio.wait_for(subscriber.next(), 10)
                assert got is not None
                received.append(got.event_id)
        return received[-1]

    writer = asyncio.ensure_future(write(300))
    try:
        await started.wait()
        # Start after the first event, then drop the stream and come back again and again while
        # the writer goes on (each gap sees writes land).
        last = written[0]
        for chunk in (40, 25, 60, 1, 30):
            last = await receive(chunk, last)
            await asyncio.sleep(0.02)
        await writer
        await receive(len(written) - 1 - len(received), last)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        await hub.stop()
    assert received == written[1:]  # in commit order, none missing, none twice
    assert hub.watches_opened == 1  # one shared watch for every subscription
