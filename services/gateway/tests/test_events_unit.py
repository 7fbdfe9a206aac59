"""Events in the gateway over an in-memory store: which a caller sees (filters, paging), E2B's
wire shape, the hub's fan-out (a slow subscriber is cut, the others go on), its resume seam,
and the death certificate lookup."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import (
    InvalidArgument,
    NotFound,
    OutOfRange,
    ResourceExhausted,
    Unavailable,
)
from aenv_gateway.cluster.directory import InMemoryClusterView, SandboxDirectory
from aenv_gateway.core.events.deaths import Deaths, SandboxDied
from aenv_gateway.core.events.memory import InMemoryEventStore
from aenv_gateway.core.events.reader import EventFilter, EventReader, checked_page, checked_types
from aenv_gateway.core.events.stream import EventHub
from aenv_gateway.core.events.wire import e2b_event, e2b_names, native_event, native_types
from aenv_gateway.keys.auth import ADMIN_KEY_ID

CREATED, READY, PAUSED, KILLED, DIED, LOST, FORKED = (
    c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_READY, c.SANDBOX_EVENT_TYPE_PAUSED,
    c.SANDBOX_EVENT_TYPE_KILLED, c.SANDBOX_EVENT_TYPE_DIED, c.SANDBOX_EVENT_TYPE_LOST,
    c.SANDBOX_EVENT_TYPE_FORKED)


def event(sandbox: str, type_: int, owner: str = "k1", **fields: Any) -> c.SandboxEvent:
    return c.SandboxEvent(sandbox_id=sandbox, type=type_, owner_key_id=owner,  # type: ignore[arg-type]
                          template_id="base", **fields)


async def recorded(store: InMemoryEventStore, *events: c.SandboxEvent) -> list[str]:
    ids = []
    for e in events:
        await store.record(e)
        ids.append(e.event_id)
    return ids


async def test_a_key_sees_its_own_sandboxes_events_and_the_admin_sees_all() -> None:
    store = InMemoryEventStore()
    await recorded(store, event("a", CREATED, "k1"), event("b", CREATED, "k2"),
                   event("a", READY, "k1"))
    reader = EventReader(store)
    page = checked_page(0, None, True)
    mine = await reader.list(EventFilter("k1"), page)
    assert [(e.sandbox_id, e.type) for e in mine] == [("a", CREATED), ("a", READY)]
    assert len(await reader.list(EventFilter(ADMIN_KEY_ID), page)) == 3
    # One sandbox's index, still only its owner's (or the admin's).
    assert await reader.list(EventFilter("k2", sandbox_id="a"), page) == []
    assert len(await reader.list(EventFilter(ADMIN_KEY_ID, sandbox_id="a"), page)) == 2


async def test_filters_by_type_metadata_and_lease() -> None:
    store = InMemoryEventStore()
    await recorded(store, event("a", CREATED, metadata={"rollout_id": "r1", "step": "1"}),
                   event("b", CREATED, metadata={"rollout_id": "r2"}, lease_id="L"),
                   event("a", PAUSED, metadata={"rollout_id": "r1", "step": "1"}))
    reader = EventReader(store)
    page = checked_page(0, 100, True)
    by_meta = await reader.list(EventFilter("k1", metadata={"rollout_id": "r1"}), page)
    assert [e.type for e in by_meta] == [CREATED, PAUSED]
    by_type = await reader.list(EventFilter("k1", types=frozenset({PAUSED})), page)
    assert [e.sandbox_id for e in by_type] == ["a"]
    assert EventFilter("k1", lease_id="L").admits((await store.events("events"))[1])
    assert not EventFilter("k1", lease_id="L").admits((await store.events("events"))[0])


async def test_paging_newest_first_by_default_with_offset_and_limit() -> None:
    store = InMemoryEventStore()
    ids = await recorded(store, *(event(f"s{i}", CREATED) for i in range(15)))
    reader = EventReader(store)
    first = await reader.list(EventFilter("k1"), checked_page(0, None, False))
    assert [e.event_id for e in first] == ids[::-1][:10]  # E2B's default limit: 10
    second = await reader.list(EventFilter("k1"), checked_page(10, 10, False))
    assert [e.event_id for e in second] == ids[::-1][10:]
    ascending = await reader.list(EventFilter("k1"), checked_page(3, 2, True))
    assert [e.event_id for e in ascending] == ids[3:5]


@pytest.mark.parametrize(("offset", "limit"), [(0, 101), (0, -1), (-1, 10)])
def test_page_bounds_are_refused(offset: int, limit: int) -> None:
    with pytest.raises(InvalidArgument):
        checked_page(offset, limit, False)


def test_unknown_types_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        checked_types([c.SANDBOX_EVENT_TYPE_UNSPECIFIED])
    with pytest.raises(InvalidArgument):
        e2b_names(["sandbox.lifecycle.ready"])
    with pytest.raises(InvalidArgument):
        native_types(["exploded"])
    assert native_types(["died", "lost"]) == {DIED, LOST}


def test_e2b_routes_serve_only_what_e2b_names() -> None:
    served = EventFilter("k", e2b_names=e2b_names([]))
    for kind in (READY, FORKED, LOST):
        assert not served.admits(event("s", kind, "k"))
    # E2B's `killed` stands for an owner's kill, a timeout that killed and a death.
    killed = EventFilter("k", e2b_names=e2b_names(["sandbox.lifecycle.killed"]))
    assert all(killed.admits(event("s", kind, "k", detail="killed"))
               for kind in (KILLED, c.SANDBOX_EVENT_TYPE_TIMED_OUT, DIED))
    # A timeout that paused is E2B's pause.
    paused_timeout = event("s", c.SANDBOX_EVENT_TYPE_TIMED_OUT, "k", detail="paused")
    assert not killed.admits(paused_timeout)
    assert EventFilter("k", e2b_names=e2b_names(["sandbox.lifecycle.paused"])).admits(
        paused_timeout)


def test_e2b_wire_shape() -> None:
    died = event("sbx1", DIED, metadata={"rollout_id": "r1"}, cause=c.DEATH_CAUSE_VMM_CRASH,
                 detail="qemu killed by signal 9", node_id="n1", event_id="0" * 20 + "-abcdef01")
    died.time.FromNanoseconds(1_700_000_000_123_456_789)
    body = e2b_event(died)
    assert set(body) == {"id", "version", "type", "eventData", "sandboxBuildId",
                         "sandboxExecutionId", "sandboxId", "sandboxTeamId", "sandboxTemplateId",
                         "timestamp"}
    assert body["type"] == "sandbox.lifecycle.killed"
    assert body["sandboxId"] == "sbx1" and body["sandboxTemplateId"] == "base"
    assert body["timestamp"] == "2023-11-14T22:13:20.123456789Z"
    assert body["eventData"] == {
        "aenv_type": "died", "sandbox_metadata": {"rollout_id": "r1"},
        "aenv_cause": "vmm_crash", "aenv_detail": "qemu killed by signal 9", "aenv_node_id": "n1"}
    native = native_event(died)
    assert native["type"] == "died" and native["cause"] == "vmm_crash"
    assert native["nodeId"] == "n1" and native["id"] == died.event_id


async def collect(subscription_next: object, count: int) -> list[c.SandboxEvent]:
    got: list[c.SandboxEvent] = []
    while len(got) < count:
        item = await asyncio.wait_for(subscription_next(), 2)  # type: ignore[operator]
        if item is not None:
            got.append(item)
    return got


async def test_fan_out_cuts_a_slow_subscriber_and_not_the_others() -> None:
    store = InMemoryEventStore()
    hub = EventHub(store, queue_size=4)
    await hub.start()
    try:
        async with hub.subscribe(EventFilter("k1")) as slow, \
                hub.subscribe(EventFilter("k1")) as fast:
            reader = asyncio.ensure_future(collect(fast.next, 10))
            for i in range(10):
                await store.record(event(f"s{i}", CREATED))
                await asyncio.sleep(0.01)  # the fast one keeps up; the slow one never reads
            assert [e.sandbox_id for e in await reader] == [f"s{i}" for i in range(10)]
            # The slow one drains what it had, then learns it was cut.
            assert [e.sandbox_id for e in await collect(slow.next, 4)] == ["s0", "s1", "s2",
                                                                              "s3"]
            with pytest.raises(ResourceExhausted):
                await slow.next(1)
            assert hub.subscribers == 1
        assert hub.subscribers == 0
    finally:
        await hub.stop()


async def test_subscribers_see_only_what_their_filter_admits() -> None:
    store = InMemoryEventStore()
    hub = EventHub(store)
    await hub.start()
    try:
        async with hub.subscribe(EventFilter("k2", types=frozenset({DIED}))) as sub:
            await store.record(event("a", CREATED, "k2"), event("b", DIED, "k1"))
            await store.record(event("c", DIED, "k2"))
            assert [e.sandbox_id for e in await collect(sub.next, 1)] == ["c"]
            assert await sub.next(0.05) is None
    finally:
        await hub.stop()


async def test_resume_replays_what_came_after_without_gaps_or_repeats() -> None:
    store = InMemoryEventStore()
    hub = EventHub(store)
    await hub.start()
    try:
        ids = await recorded(store, *(event(f"s{i}", CREATED) for i in range(3)))
        async with hub.subscribe(EventFilter("k1"), after_event_id=ids[0]) as sub:
            await store.record(event("s3", CREATED))
            got = await collect(sub.next, 3)
            assert [e.sandbox_id for e in got] == ["s1", "s2", "s3"]
            assert await sub.next(0.05) is None
        store.forget(ids[0])
        with pytest.raises(OutOfRange):
            async with hub.subscribe(EventFilter("k1"), after_event_id=ids[0]):
                pass
        with pytest.raises(InvalidArgument):
            async with hub.subscribe(EventFilter("k1"), after_event_id="nope"):
                pass
    finally:
        await hub.stop()


async def test_resume_seam_events_racing_the_replay_come_once() -> None:
    """Events committed while a subscriber's replay is read are neither lost nor repeated."""
    store = InMemoryEventStore()
    hub = EventHub(store)
    await hub.start()
    try:
        (first,) = await recorded(store, event("s0", CREATED))
        real_after = store.after

        async def after_with_a_write_racing(event_id: str):  # type: ignore[no-untyped-def]
            await store.record(event("before-read", CREATED))  # committed before the read
            replay = await real_after(event_id)
            await store.record(event("after-read", CREATED))  # committed after it
            return replay

        store.after = after_with_a_write_racing  # type: ignore[method-assign]
        async with hub.subscribe(EventFilter("k1"), after_event_id=first) as sub:
            await asyncio.sleep(0.05)  # the hub delivers both to the queue too
            got = await collect(sub.next, 2)
            assert [e.sandbox_id for e in got] == ["before-read", "after-read"]
            assert await sub.next(0.05) is None
    finally:
        await hub.stop()


async def test_a_failed_watch_cuts_subscribers_and_the_hub_recovers() -> None:
    store = InMemoryEventStore()
    hub = EventHub(store)
    await hub.start()
    try:
        async with hub.subscribe(EventFilter("k1")) as sub:
            await store.cut(Unavailable("etcd restarted"))
            with pytest.raises(Unavailable):
                await asyncio.wait_for(sub.next(), 5)
        async with hub.subscribe(EventFilter("k1")) as again:
            await store.record(event("later", CREATED))
            assert [e.sandbox_id for e in await collect(again.next, 1)] == ["later"]
        assert hub.watches_opened == 2
    finally:
        await hub.stop()


async def test_deaths_explain_not_found_with_the_certificate() -> None:
    store = InMemoryEventStore()
    view = InMemoryClusterView()
    deaths = Deaths(store, SandboxDirectory(view))
    plain = NotFound('sandbox "x" not found')
    assert await deaths.explain("x", plain) is plain  # no certificate: as it was
    await store.certify(
        c.DeathCertificate(sandbox_id="x", cause=c.DEATH_CAUSE_GUEST_OOM, detail="oom-kill: 1"),
        event("x", DIED, cause=c.DEATH_CAUSE_GUEST_OOM))
    died = await deaths.explain("x", plain)
    assert isinstance(died, SandboxDied)
    assert died.message == "sandbox x died: guest_oom (oom-kill: 1)"
    assert died.trailing_metadata() == (("aenv-death-cause", "guest_oom"),
                                        ("aenv-death-detail", "oom-kill: 1"))
    assert await deaths.explain("x", InvalidArgument("bad")) is not died  # only NotFound
    assert await deaths.explain("a/b", plain) is plain  # an id no key can name
    # A lost sandbox's certificate is on its record (the scheduler's sweep puts it there).
    view.sandbox_records["y"] = c.SandboxRecord(
        sandbox_id="y", node_id="gone", state=c.SANDBOX_STATE_LOST,
        death=c.DeathCertificate(sandbox_id="y", cause=c.DEATH_CAUSE_NODE_LOST))
    lost = await deaths.explain("y", NotFound("lost"))
    assert isinstance(lost, SandboxDied) and lost.message == "sandbox y died: node_lost"
