"""The event log against a real etcd: indexes, certificates, retention leases."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.events import EventLog, death_message, new_event_id
from aenv_common.events.log import EVENTS, KEY_EVENTS, NO_KEY, SANDBOX_EVENTS

pytestmark = pytest.mark.etcd


def event(sandbox_id: str, kind: c.SandboxEventType, owner: str = "") -> c.SandboxEvent:
    return c.SandboxEvent(sandbox_id=sandbox_id, type=kind, owner_key_id=owner)


def test_event_ids_sort_by_time() -> None:
    assert new_event_id(5) < new_event_id(40) < new_event_id(10**18)
    assert len(new_event_id()) == 29


async def test_events_are_indexed_by_sandbox_and_key_in_time_order(
    cluster_store: ClusterStore,
) -> None:
    log = EventLog(cluster_store, retention_s=600)
    await log.record(event("s1", c.SANDBOX_EVENT_TYPE_CREATED, "k1"))
    await log.record(event("s2", c.SANDBOX_EVENT_TYPE_CREATED))
    await log.record(event("s1", c.SANDBOX_EVENT_TYPE_KILLED, "k1"))
    every = await log.events(EVENTS)
    assert [(e.sandbox_id, e.type) for e in every] == [
        ("s1", c.SANDBOX_EVENT_TYPE_CREATED), ("s2", c.SANDBOX_EVENT_TYPE_CREATED),
        ("s1", c.SANDBOX_EVENT_TYPE_KILLED)]
    assert [e.type for e in await log.events(SANDBOX_EVENTS, "s1")] == [
        c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_KILLED]
    assert {e.sandbox_id for e in await log.events(KEY_EVENTS, "k1")} == {"s1"}
    assert [e.sandbox_id for e in await log.events(KEY_EVENTS, NO_KEY)] == ["s2"]
    assert all(e.event_id and e.time.seconds for e in every)


async def test_every_key_is_on_a_retention_lease_that_outlives_the_window(
    cluster_store: ClusterStore,
) -> None:
    log = EventLog(cluster_store, retention_s=600)
    await log.record(event("s1", c.SANDBOX_EVENT_TYPE_CREATED))
    result = await cluster_store.client.get_prefix(log.prefix(EVENTS))
    lease = result.kvs[0].lease
    assert lease
    ttl = await cluster_store.client.get_lease_info(lease)
    assert 600 <= ttl.TTL <= 600 + 60


async def test_a_certificate_lands_with_its_event(cluster_store: ClusterStore) -> None:
    log = EventLog(cluster_store, retention_s=600)
    assert await log.death("s9") is None
    cert = c.DeathCertificate(sandbox_id="s9", cause=c.DEATH_CAUSE_VMM_CRASH,
                              detail="qemu killed by signal 9")
    died = event("s9", c.SANDBOX_EVENT_TYPE_DIED)
    died.cause = c.DEATH_CAUSE_VMM_CRASH
    await log.certify(cert, died)
    found = await log.death("s9")
    assert found is not None and found.event_id == died.event_id
    assert death_message(found) == "sandbox s9 died: vmm_crash (qemu killed by signal 9)"
    assert [e.cause for e in await log.events(SANDBOX_EVENTS, "s9")] == [c.DEATH_CAUSE_VMM_CRASH]


async def test_a_revoked_retention_lease_is_replaced(cluster_store: ClusterStore) -> None:
    log = EventLog(cluster_store, retention_s=600)
    await log.record(event("s1", c.SANDBOX_EVENT_TYPE_CREATED))
    first = (await cluster_store.client.get_prefix(log.prefix(EVENTS))).kvs[0].lease
    await cluster_store.client.revoke_lease(first)
    await log.record(event("s1", c.SANDBOX_EVENT_TYPE_KILLED))
    kvs = (await cluster_store.client.get_prefix(log.prefix(EVENTS))).kvs
    assert len(kvs) == 1 and kvs[0].lease != first
