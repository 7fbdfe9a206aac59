"""Snapshots, fork and reset with real VMs."""

from __future__ import annotations

import asyncio
import time

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, InvalidArgument, NotFound
from aenv_nodeagent.sandbox.model import Sandbox

from .conftest import Node, netns_with, pss_mib, qemus_under, spec
from .guest import counter, sh, start_counter
from .test_warm_pool import backing_of

pytestmark = [pytest.mark.vm, pytest.mark.netns]

CHILDREN = 16


async def test_snapshot_restores_its_moment_and_delete_waits_for_users(node: Node) -> None:
    source = spec()
    sandbox = await node.sandboxes.creates.create(source)
    token = source.envd_access_token
    await sh(node.session, sandbox.host, token, "echo before > /root/f1")
    snapshot = await node.sandboxes.snapshots.create(source.sandbox_id, "named")
    listed = node.sandboxes.snapshots.store.listed(source.sandbox_id)
    assert [m.names for m in listed] == [["named"]]
    # The source continues, on a new layer.
    await sh(node.session, sandbox.host, token, "echo after > /root/f2")
    restored_spec = spec(template_id=snapshot.snapshot_id)
    restored = await node.sandboxes.creates.create(restored_spec)
    rtoken = restored_spec.envd_access_token
    assert await sh(node.session, restored.host, rtoken, "cat /root/f1") == "before\n"
    assert await sh(node.session, restored.host, rtoken, "ls /root") == "f1\n"
    # Paused as a delta onto the snapshot's memory, which it pins.
    await sh(node.session, restored.host, rtoken, "echo in-memory > /run/m")
    await node.sandboxes.pauses.pause(restored_spec.sandbox_id)
    await node.settled()  # its memory is written as its VM quits
    assert (restored.directory / "delta.state").is_file()
    # Deleting it while `restored` stands on its disk layer and memory: gone from the list, disk
    # and memory kept.
    await node.sandboxes.snapshots.delete(snapshot.snapshot_id)
    assert node.sandboxes.snapshots.store.listed() == []
    with pytest.raises(NotFound):
        await node.sandboxes.creates.create(spec(template_id=snapshot.snapshot_id))
    assert node.sandboxes.context.disk.store.path(snapshot.layers[0]).is_file()
    assert not snapshot.directory.exists()
    restored = await node.sandboxes.pauses.resume(restored_spec.sandbox_id)
    assert await sh(node.session, restored.host, rtoken, "cat /run/m /root/f1") == (
        "in-memory\nbefore\n")
    await node.sandboxes.kills.kill(restored_spec.sandbox_id)
    await node.sandboxes.kills.kill(source.sandbox_id)
    assert list(node.sandboxes.context.disk.store.root.glob("*")) == []


async def test_fork_children_share_the_past_and_diverge(node: Node) -> None:
    parent_spec = spec()
    parent = await node.sandboxes.creates.create(parent_spec)
    ptoken = parent_spec.envd_access_token
    await start_counter(node.session, parent.host, ptoken)
    await sh(node.session, parent.host, ptoken, "echo shared > /root/before")
    _, at_fork = await counter(node.session, parent.host, ptoken)
    started = time.monotonic()
    results = await node.sandboxes.forks.fork(parent_spec.sandbox_id, CHILDREN)
    fork_s = time.monotonic() - started
    children = [r.record for r in results if isinstance(r, Sandbox)]
    assert len(children) == len(results), results
    assert len({c.sandbox_id for c in children} | {parent_spec.sandbox_id}) == CHILDREN + 1
    assert len({c.envd_access_token for c in children}) == CHILDREN
    hosts = [node.sandboxes.registry.get(c.sandbox_id).host for c in children]
    tokens = [c.envd_access_token for c in children]
    await sh(node.session, hosts[0], tokens[0], "echo mine > /root/after")
    # One command per child, all children at once: under TCG every guest costs host CPU.
    listings = await asyncio.gather(*(
        sh(node.session, host, token, f"ls /root; echo {k + 2} > /tmp/step")
        for k, (host, token) in enumerate(zip(hosts, tokens, strict=True))))
    assert listings == ["after\nbefore\n"] + ["before\n"] * (CHILDREN - 1)
    assert await sh(node.session, parent.host, ptoken, "ls /root") == "before\n"
    # Each child's in-memory counter started from the parent's and now runs at its own pace;
    # their RNGs were reseeded independently.
    await node.sandboxes.kills.kill(parent_spec.sandbox_id)  # children stay undisturbed
    await asyncio.sleep(2)
    outputs = await asyncio.gather(*(
        sh(node.session, host, token, "cat /tmp/count; head -c 16 /dev/urandom | od -x")
        for host, token in zip(hosts, tokens, strict=True)))
    values = [int(out.split()[1]) for out in outputs]
    assert all(value > at_fork for value in values), (at_fork, values)
    assert len(set(values)) > CHILDREN // 2
    randoms = {out.split("\n", 1)[1] for out in outputs}
    assert len(randoms) == CHILDREN
    # Children map the fork's memory image copy-on-write: each owns only what it dirtied.
    guest_mib = node.sandboxes.registry.get(children[0].sandbox_id).record.resources.memory_mib
    pss = [pss_mib(node.sandboxes.registry.get(c.sandbox_id).vm.pid) for c in children]
    assert max(pss) < guest_mib / 4, pss
    print(f"fork into {CHILDREN} children: {fork_s:.2f}s; PSS per child "
          f"{min(pss):.0f}-{max(pss):.0f} MiB of {guest_mib} MiB guest RAM")


async def test_fork_with_failing_children_reports_them_and_leaks_nothing(node: Node) -> None:
    parent_spec = spec()
    await node.sandboxes.creates.create(parent_spec)
    ids = ["forkgood1", parent_spec.sandbox_id, "forkgood2", "Bad-Id!"]
    results = await node.sandboxes.forks.fork(parent_spec.sandbox_id, len(ids), child_ids=ids)
    good, taken, good2, bad = results
    assert isinstance(good, Sandbox) and isinstance(good2, Sandbox), results
    assert isinstance(taken, Conflict) and isinstance(bad, InvalidArgument), results
    assert sorted(sbx.record.sandbox_id for sbx in node.sandboxes.registry.all()) == sorted(
        [parent_spec.sandbox_id, "forkgood1", "forkgood2"])
    assert len(netns_with(node.prefix)) == 3 and len(qemus_under(node.state_dir)) == 3
    assert sorted(p.name for p in (node.state_dir / "sandboxes").iterdir()) == sorted(
        [parent_spec.sandbox_id, "forkgood1", "forkgood2"])
    assert node.sandboxes.snapshots.store.listed() == []  # the fork's capture is internal


async def test_reset_rewinds_in_place(node: Node) -> None:
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    token = s.envd_access_token
    await sh(node.session, sandbox.host, token, "echo 1 > /root/episode")
    snapshot = await node.sandboxes.snapshots.create(s.sandbox_id)
    for _ in range(2):
        await sh(node.session, sandbox.host, token, "echo 2 > /root/episode; touch /root/junk")
        record = await node.sandboxes.forks.reset(s.sandbox_id, snapshot.snapshot_id)
        assert record.sandbox_id == s.sandbox_id
        assert record.state == cluster_pb2.SANDBOX_STATE_RUNNING
        assert await sh(node.session, sandbox.host, token, "ls /root; cat /root/episode") == (
            "episode\n1\n")


async def test_layer_chain_is_compacted_past_its_bound(node: Node) -> None:
    node.sandboxes.context.disk.max_layers = 2
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    token = s.envd_access_token
    snapshots = []
    for i in range(3):
        await sh(node.session, sandbox.host, token, f"echo {i} > /root/l{i}; sync")
        snapshots.append(await node.sandboxes.snapshots.create(s.sandbox_id, hidden=True))
    await node.sandboxes.context.disk.compacted(s.sandbox_id)
    # The running overlay now stands on the template's disk alone, with every byte still there.
    active = max(sandbox.directory.glob("*.active.qcow2"), key=lambda p: p.stat().st_mtime)
    assert "/layers/" not in backing_of(active)
    assert await sh(node.session, sandbox.host, token,
                    "echo 3 > /root/l3; cat /root/l0 /root/l1 /root/l2 /root/l3") == "0\n1\n2\n3\n"
    # The snapshots keep their layers: the oldest still restores its moment.
    old_spec = spec(template_id=snapshots[0].snapshot_id)
    old = await node.sandboxes.creates.create(old_spec)
    assert await sh(node.session, old.host, old_spec.envd_access_token, "ls /root") == "l0\n"
    await node.sandboxes.kills.kill(old_spec.sandbox_id)
    for meta in snapshots:
        await node.sandboxes.snapshots.delete(meta.snapshot_id)
    # Nothing else referenced them.
    assert list(node.sandboxes.context.disk.store.root.glob("*")) == []
