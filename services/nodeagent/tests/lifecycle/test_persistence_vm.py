"""Snapshots persisted to a real snapstore (fs backend) and restored by another node, with VMs."""

from __future__ import annotations

import asyncio

import pytest

from .conftest import node_parts, spec
from .guest import sh
from .test_warm_pool import backing_of

pytestmark = [pytest.mark.vm, pytest.mark.netns]


async def test_another_node_restores_a_persisted_snapshot(snapstore: str) -> None:
    # Pools of their own: other lifecycle tests (maybe running now) use 10.217.0.0/24.
    async with node_parts(snapstore=snapstore, pool_cidr="10.219.0.0/24") as here, \
            node_parts(snapstore=snapstore, pool_cidr="10.218.0.0/24") as there:
        assert here.lifecycle.persistence is not None
        source = spec()
        sandbox = await here.lifecycle.create(source)
        token = source.envd_access_token
        await sh(here.session, sandbox.host, token, "echo before > /root/f1 && sync")
        first = await here.lifecycle.create_snapshot(source.sandbox_id, "first")
        await asyncio.wait_for(here.lifecycle.persistence.persisted(first.snapshot_id), 300)
        assert first.persisted
        await sh(here.session, sandbox.host, token, "echo after > /root/f2 && sync")
        second = await here.lifecycle.create_snapshot(source.sandbox_id)
        await asyncio.wait_for(here.lifecycle.persistence.persisted(second.snapshot_id), 300)
        stats = here.lifecycle.persistence.stats
        # The first snapshot's layer and unchanged memory chunks are not sent again (the guest
        # kernel dirties pages all over its RAM meanwhile, so many 2 MiB chunks do change).
        again = stats[second.snapshot_id]
        assert again.sent_chunks < again.chunks - again.zero_chunks, again
        assert again.sent_bytes < stats[first.snapshot_id].sent_bytes, stats

        restored_spec = spec(template_id=first.snapshot_id)
        restored = await there.lifecycle.create(restored_spec)
        rtoken = restored_spec.envd_access_token
        assert await sh(there.session, restored.host, rtoken, "cat /root/f1") == "before\n"
        assert await sh(there.session, restored.host, rtoken, "ls /root") == "f1\n"
        pulled = there.lifecycle.snapshots.get(first.snapshot_id)
        layer = there.lifecycle.layers.path(pulled.layers[0])
        assert backing_of(layer).startswith(str(there.state_dir)) or len(pulled.layers) == 1

        await here.lifecycle.delete_snapshot(first.snapshot_id)
        await here.lifecycle.kill(source.sandbox_id)
        await there.lifecycle.kill(restored_spec.sandbox_id)
