"""A pause lease that lapses while the node agent is down: the restarted agent, which never saw
the lease alive, pauses its sandbox (the action its record kept from the create) instead of
killing it. A real guest, a real restart (adoption of the running VM), the reaper over a real
etcd in which the lease is gone."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.leases import LEASES, PAUSE
from aenv_nodeagent.leases import LeaseReaper, WingSandboxes

from .conftest import node_parts, spec

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.etcd]


async def test_a_restarted_agent_pauses_what_a_lapsed_pause_lease_held(
    cluster_store: ClusterStore,
) -> None:
    async with node_parts() as node:
        await node.records.put_record(LEASES, "lease-pause", c.LeaseRecord(
            lease_id="lease-pause", on_expiry=PAUSE))
        made = spec(lease_id="lease-pause")
        sandbox = await node.sandboxes.creates.create(made)
        assert sandbox.record.lease_on_expiry == PAUSE
        # The agent dies; the lease lapses meanwhile (etcd holds no lease of that id).
        await node.records.delete_record(LEASES, "lease-pause")
        restarted = await node.restart()
        assert restarted.sandboxes.registry.has(made.sandbox_id)
        reaper = LeaseReaper(cluster_store, WingSandboxes(restarted.sandboxes, node.records),
                             interval_s=3600, concurrency=2)
        await reaper.start()  # its first reconcile ends what lapsed while the agent was down
        try:
            paused = restarted.sandboxes.registry.paused(made.sandbox_id)
            assert paused is not None, "killed instead of paused"
            assert reaper.reaped == 1
            published = node.records.records[made.sandbox_id]
            assert published.state == c.SANDBOX_STATE_PAUSED
            # Detached from the lapsed lease: its owner may resume it.
            assert (published.lease_id, published.lease_on_expiry) == (
                "", c.LEASE_EXPIRY_ACTION_UNSPECIFIED)
        finally:
            await reaper.stop()
