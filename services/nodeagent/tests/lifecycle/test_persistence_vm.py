"""Snapshots persisted to a real snapstore (fs backend) and restored by another node, with VMs."""

from __future__ import annotations

import asyncio

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict
from aenv_testing.records import MemoryRecords

from ..stored import manifests
from .conftest import node_parts, spec, until
from .guest import counter, sh, start_counter
from .test_warm_pool import backing_of

pytestmark = [pytest.mark.vm, pytest.mark.netns]


async def test_another_node_restores_a_persisted_snapshot(snapstore: str) -> None:
    # Pools of their own: other lifecycle tests (maybe running now) use 10.217.0.0/24.
    async with node_parts(snapstore=snapstore) as here, \
            node_parts(snapstore=snapstore) as there:
        assert here.sandboxes.context.persistence is not None
        source = spec()
        sandbox = await here.sandboxes.creates.create(source)
        token = source.envd_access_token
        await sh(here.session, sandbox.host, token, "echo before > /root/f1 && sync")
        first = await here.sandboxes.snapshots.create(source.sandbox_id, "first")
        await asyncio.wait_for(here.sandboxes.context.persistence.persisted(first.snapshot_id), 300)
        assert first.persisted
        await sh(here.session, sandbox.host, token, "echo after > /root/f2 && sync")
        second = await here.sandboxes.snapshots.create(source.sandbox_id)
        persistence = here.sandboxes.context.persistence
        await asyncio.wait_for(persistence.persisted(second.snapshot_id), 300)
        stats = here.sandboxes.context.persistence.stats
        # The first snapshot's layer and unchanged memory chunks are not sent again (the guest
        # kernel dirties pages all over its RAM meanwhile, so many 2 MiB chunks do change).
        again = stats[second.snapshot_id]
        assert again.sent_chunks < again.chunks - again.zero_chunks, again
        assert again.sent_bytes < stats[first.snapshot_id].sent_bytes, stats

        restored_spec = spec(template_id=first.snapshot_id)
        restored = await there.sandboxes.creates.create(restored_spec)
        rtoken = restored_spec.envd_access_token
        assert await sh(there.session, restored.host, rtoken, "cat /root/f1") == "before\n"
        assert await sh(there.session, restored.host, rtoken, "ls /root") == "f1\n"
        pulled = there.sandboxes.snapshots.store.get(first.snapshot_id)
        layer = there.sandboxes.context.disk.store.path(pulled.layers[0])
        assert backing_of(layer).startswith(str(there.state_dir)) or len(pulled.layers) == 1

        await here.sandboxes.snapshots.delete(first.snapshot_id)
        await here.sandboxes.kills.kill(source.sandbox_id)
        await there.sandboxes.kills.kill(restored_spec.sandbox_id)


async def test_paused_sandboxes_outlive_their_node(snapstore: str) -> None:
    """Node A pauses two sandboxes and is lost. Node B resumes one (its process still counting,
    its files there) and kills the other; A, back, drops its stale copies."""
    records = MemoryRecords()
    records.nodes["node-a"] = cluster_pb2.NodeRecord(node_id="node-a")
    async with node_parts(snapstore=snapstore, node_id="node-a",
                          records=records) as here, \
            node_parts(snapstore=snapstore, node_id="node-b",
                       records=records) as there:
        moved, dropped = spec(), spec()
        sandbox = await here.sandboxes.creates.create(moved)
        await here.sandboxes.creates.create(dropped)
        token = moved.envd_access_token
        await start_counter(here.session, sandbox.host, token)
        await sh(here.session, sandbox.host, token, "echo kept > /root/file")
        pid, before = await counter(here.session, sandbox.host, token)
        await here.sandboxes.pauses.pause(moved.sandbox_id)
        await here.sandboxes.pauses.pause(dropped.sandbox_id)
        await until(lambda: all(records.records[s.sandbox_id].paused_image
                                for s in (moved, dropped)), "paused states stored", 300)
        stored = {records.records[s.sandbox_id].paused_image for s in (moved, dropped)}
        assert stored <= await manifests(snapstore)

        with pytest.raises(Conflict, match="alive"):
            await there.sandboxes.transfers.take_over(moved.sandbox_id)  # A still holds it
        del records.nodes["node-a"]  # A's lease ran out

        taken = await there.sandboxes.transfers.take_over(moved.sandbox_id)
        assert taken is not None and records.records[moved.sandbox_id].node_id == "node-b"
        with pytest.raises(Conflict):
            await there.sandboxes.transfers.take_over(moved.sandbox_id)
        resumed = await there.sandboxes.pauses.resume(moved.sandbox_id, timeout_s=60)
        assert await sh(there.session, resumed.host, token, "cat /root/file") == "kept\n"
        await asyncio.sleep(2.2)  # > one counter tick
        after_pid, after = await counter(there.session, resumed.host, token)
        assert after_pid == pid and after > before  # the same process, counting on
        assert records.records[moved.sandbox_id].paused_image == ""

        assert await there.sandboxes.transfers.take_over(dropped.sandbox_id, discard=True) is None
        assert dropped.sandbox_id not in records.records
        await until_gone(snapstore, stored)

        back = await here.restart()  # A returns: neither sandbox is its own any more
        assert back.sandboxes.registry.paused_ids() == []
        assert not any((here.state_dir / "sandboxes" / s.sandbox_id).exists()
                       for s in (moved, dropped))
        await there.sandboxes.kills.kill(moved.sandbox_id)


async def until_gone(snapstore: str, manifest_ids: set[str]) -> None:
    """Deletes from snapstore run in the background."""
    deadline = asyncio.get_running_loop().time() + 30
    while manifest_ids & await manifests(snapstore):
        assert asyncio.get_running_loop().time() < deadline, "stored states not deleted"
        await asyncio.sleep(0.1)
