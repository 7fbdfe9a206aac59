"""Leases over a real etcd, as two gateways share them: a lease taken through one is read,
renewed and released through the other; one nobody renews lapses at its ttl (etcd ends it, no
gateway does); a released one is gone at once."""

from __future__ import annotations

import asyncio
import time

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import NotFound
from aenv_gateway.core.leases import EtcdLeaseStore, Leases

pytestmark = pytest.mark.etcd
KILL, PAUSE = cluster_pb2.LEASE_EXPIRY_ACTION_KILL, cluster_pb2.LEASE_EXPIRY_ACTION_PAUSE


def _sandbox(sandbox_id: str, lease_id: str) -> cluster_pb2.SandboxRecord:
    return cluster_pb2.SandboxRecord(sandbox_id=sandbox_id, lease_id=lease_id,
                                     state=cluster_pb2.SANDBOX_STATE_RUNNING)


async def test_leases_shared_renewed_released_and_lapsing(
    cluster_store: ClusterStore, etcd_settings: CommonSettings,
) -> None:
    sandboxes: list[cluster_pb2.SandboxRecord] = []
    other_store = await ClusterStore.connect(etcd_settings)
    try:
        one = Leases(EtcdLeaseStore(cluster_store), lambda: sandboxes)
        other = Leases(EtcdLeaseStore(other_store), lambda: sandboxes)
        taken = await one.create("k1", 5, PAUSE, "run", {"exp": "1"})
        lease_id = taken.record.lease_id
        assert taken.record.etcd_lease and taken.record.on_expiry == PAUSE
        sandboxes.append(_sandbox("s1", lease_id))
        seen = await other.get("k1", lease_id)
        assert seen.record == taken.record and seen.sandbox_count == 1
        assert 3 <= seen.expires_at - time.time() <= 5.5
        with pytest.raises(NotFound):
            await other.get("k2", lease_id)  # another key's
        # Renewed through the other gateway, every 2 s for 7 s: it outlives its 5 s ttl.
        for _ in range(4):
            await asyncio.sleep(1.75)
            expires_at = await other.renew("k1", lease_id)
            assert 4 <= expires_at - time.time() <= 5.5
        assert [v.record.lease_id for v in await one.list("k1")] == [lease_id]
        # Not renewed: etcd ends it at its ttl.
        await asyncio.sleep(5.5)
        for lapsed in (one.get("k1", lease_id), one.renew("k1", lease_id),
                       one.release("k1", lease_id)):
            with pytest.raises(NotFound):
                await lapsed
        with pytest.raises(NotFound):
            await one.admit("k1", lease_id, {})
        assert await one.list("k1") == []
        # A release ends it at once, through any gateway.
        second = (await one.create("k1", 60, KILL)).record.lease_id
        assert (await other.admit("k1", "", {"aenv.lease": second})) == (
            second, {"aenv.lease": second})
        await other.release("k1", second)
        with pytest.raises(NotFound):
            await one.get("k1", second)
        assert await cluster_store.list_records("leases", cluster_pb2.LeaseRecord) == []
    finally:
        await other_store.close()
