"""A restarted node agent re-adopts the VMs that kept running, and cleanly reports the rest.

`Node.restart` stands in for a crash: the old agent's objects are dropped without any cleanup
(only their QMP sessions close, as a dead process's would), and a new agent recovers.
"""

from __future__ import annotations

import asyncio

import pytest

from aenv.cluster.v1 import cluster_pb2

from .conftest import netns_with, node_parts, qemus_under, spec, until
from .guest import counter, sh, start_counter

pytestmark = [pytest.mark.vm, pytest.mark.netns]

RUNNING, LOST = cluster_pb2.SANDBOX_STATE_RUNNING, cluster_pb2.SANDBOX_STATE_LOST


async def test_a_sandbox_from_the_warm_pool_is_adopted_and_lives_on() -> None:
    async with node_parts(pool_vms=1) as node:
        # From now on VMs are pre-started for the template.
        await node.sandboxes.creates.create(spec())
        await until(lambda: node.pool.sizes()["vms"] == 1, "pre-started VM")
        s = spec()
        sandbox = await node.sandboxes.creates.create(s)
        assert "pooled_vm" in sandbox.timings_ms
        token = s.envd_access_token
        await start_counter(node.session, sandbox.host, token)
        pid, before = await counter(node.session, sandbox.host, token)

        restarted = await node.restart()
        adopted = restarted.sandboxes.registry.get(s.sandbox_id)
        # Its directory was renamed from the pool's after QEMU started: still found, still ours.
        assert adopted.vm.pid == sandbox.vm.pid
        await asyncio.sleep(2.2)  # > one counter tick
        assert (await counter(restarted.session, adopted.host, token))[0] == pid
        assert (await counter(restarted.session, adopted.host, token))[1] > before
        # Pause/resume works on the adopted VM (capture, disk chain, memory image).
        await restarted.sandboxes.pauses.pause(s.sandbox_id)
        resumed = await restarted.sandboxes.pauses.resume(s.sandbox_id)
        assert (await counter(restarted.session, resumed.host, token))[0] == pid
        # Nothing of the old pool was left running.
        assert not [d for d in (node.state_dir / "sandboxes").iterdir()
                    if d.name.startswith(".pool-")]
        assert len(qemus_under(node.state_dir)) == len(restarted.sandboxes.registry.all()) == 2


async def test_what_cannot_be_adopted_is_killed_and_reported() -> None:
    async with node_parts() as node:
        stopped, kept, unknown = spec(), spec(), spec()
        sandboxes = [await node.sandboxes.creates.create(s) for s in (stopped, kept, unknown)]
        await sandboxes[0].vm.pause()  # as if the agent died during a capture
        del node.records.records[unknown.sandbox_id]  # the cluster no longer knows it

        restarted = await node.restart()
        records = node.records.records
        assert records[stopped.sandbox_id].state == LOST
        assert records[kept.sandbox_id].state == RUNNING
        assert unknown.sandbox_id not in records
        running = restarted.sandboxes.registry.all()
        assert [sbx.record.sandbox_id for sbx in running] == [kept.sandbox_id]
        assert len(qemus_under(node.state_dir)) == 1 and len(netns_with(node.prefix)) == 1
        assert sorted(d.name for d in (node.state_dir / "sandboxes").iterdir()) == [
            kept.sandbox_id]
        adopted = restarted.sandboxes.registry.get(kept.sandbox_id)
        assert await sh(restarted.session, adopted.host, kept.envd_access_token,
                        "echo alive") == "alive\n"
