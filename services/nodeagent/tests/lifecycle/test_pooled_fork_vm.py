"""A fork's children on pre-started VMs with real, jailed QEMUs: each child's RAM is the
capture's image mapped over the template's in place and its disk the capture's layer put under
the pool's overlay, before its guest first runs; each has its parent's past and a future of its
own, and lives a full life (a snapshot of it restores, it pauses and resumes), which only holds
if its dirty log and its disk chain were re-pointed with it."""

from __future__ import annotations

import asyncio

import pytest

from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.templates.model import ROOT_DISK_ID

from .conftest import node_parts, spec, until
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

PAST = "cat /root/disk /run/mem"


async def test_children_on_pre_started_vms_have_the_past_and_a_future_of_their_own() -> None:
    async with node_parts(pool_vms=2, pool_snapshot_vms=3) as node:
        lc, pool = node.sandboxes, node.pool
        parent_spec = spec()
        parent = await lc.creates.create(parent_spec)
        ptoken = parent_spec.envd_access_token
        # On its disk, and only in its memory (tmpfs): a child must have both.
        await sh(node.session, parent.host, ptoken,
                 "echo disk > /root/disk && sync && echo mem > /run/mem")
        await until(lambda: pool.sizes()["vms"] == 2, "two pre-started VMs", 120)

        results = await lc.forks.fork(parent_spec.sandbox_id, 3)

        children = [r for r in results if isinstance(r, Sandbox)]
        assert len(children) == 3, results
        pooled = [c for c in children if "repoint" in c.timings_ms]
        assert len(pooled) >= 2 and all("launch" not in c.timings_ms for c in pooled)
        tokens = {c.record.sandbox_id: c.record.envd_access_token for c in children}
        for child in children:
            token = tokens[child.record.sandbox_id]
            assert await sh(node.session, child.host, token, PAST) == "disk\nmem\n"
            await sh(node.session, child.host, token,
                     f"echo {child.record.sandbox_id} > /root/own && sync && "
                     f"echo {child.record.sandbox_id} > /run/own")
            chain = await child.vm.disk_chain(ROOT_DISK_ID)
            assert chain.backing_files[0].parent == lc.context.disk.store.root
        # Nobody else's future: not the parent's, not a sibling's.
        for sandbox, token in [(parent, ptoken)] + [
                (c, tokens[c.record.sandbox_id]) for c in children]:
            own = await sh(node.session, sandbox.host, token,
                           "cat /root/own /run/own 2>/dev/null; true")
            expected = "" if sandbox is parent else f"{sandbox.record.sandbox_id}\n" * 2
            assert own == expected

        # A pooled child lives a full life: its snapshot holds its memory and disk as they are.
        child = pooled[0]
        cid, token = child.record.sandbox_id, tokens[child.record.sandbox_id]
        await sh(node.session, child.host, token, "echo later > /run/later")
        snapshot = await lc.snapshots.create(cid, "of-a-pooled-child")
        restored_spec = spec(template_id=snapshot.snapshot_id)
        restored = await lc.creates.create(restored_spec)
        assert await sh(node.session, restored.host, restored_spec.envd_access_token,
                        "cat /root/disk /run/mem /root/own /run/own /run/later") == (
            f"disk\nmem\n{cid}\n{cid}\nlater\n")
        await lc.pauses.pause(cid)
        resumed = await lc.pauses.resume(cid)
        assert await sh(node.session, resumed.host, token, "cat /run/own /run/later") == (
            f"{cid}\nlater\n")
        # Forks of 3 were asked for: the pool keeps 3 pre-started VMs now.
        await until(lambda: pool.sizes()["vms"] == 3, "the pool grown to the fork", 120)
        await asyncio.gather(*(lc.kills.kill(s.record.sandbox_id)
                               for s in [*children, restored, parent]))
        await lc.snapshots.delete(snapshot.snapshot_id)


async def test_a_child_on_a_pre_started_vm_is_adopted_after_a_restart_and_captured_whole(
) -> None:
    async with node_parts(pool_vms=1) as node:
        parent_spec = spec()
        parent = await node.sandboxes.creates.create(parent_spec)
        await sh(node.session, parent.host, parent_spec.envd_access_token,
                 "echo disk > /root/disk && sync && echo mem > /run/mem")
        await until(lambda: node.pool.sizes()["vms"] == 1, "a pre-started VM", 120)
        (child,) = await node.sandboxes.forks.fork(parent_spec.sandbox_id, 1)
        assert isinstance(child, Sandbox) and "repoint" in child.timings_ms
        assert "memory_image" not in child.timings_ms  # on the parent's base, with the delta
        cid, token = child.record.sandbox_id, child.record.envd_access_token
        await sh(node.session, child.host, token, "echo own > /run/own")

        # The new agent finds what its RAM maps though QEMU's command line names the
        # template's file: a capture of it holds the parent's pages and its own.
        restarted = await node.restart()
        adopted = restarted.sandboxes.registry.get(cid)
        assert adopted.vm.pid == child.vm.pid
        snapshot = await restarted.sandboxes.snapshots.create(cid, "adopted")
        restored_spec = spec(template_id=snapshot.snapshot_id)
        restored = await restarted.sandboxes.creates.create(restored_spec)
        assert await sh(restarted.session, restored.host, restored_spec.envd_access_token,
                        "cat /root/disk /run/mem /run/own") == "disk\nmem\nown\n"
        await restarted.sandboxes.pauses.pause(cid)
        resumed = await restarted.sandboxes.pauses.resume(cid)
        assert await sh(restarted.session, resumed.host, token, "cat /run/mem /run/own") == (
            "mem\nown\n")
        await restarted.sandboxes.snapshots.delete(snapshot.snapshot_id)
