"""Snapshots, fork and reset with real VMs."""

from __future__ import annotations

import asyncio
import time

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound

from .conftest import Node, netns_with, qemus_under, spec
from .guest import counter, sh, start_counter

pytestmark = [pytest.mark.vm, pytest.mark.netns]

CHILDREN = 4  # 16 exceeds the time budget while children restore full private RAM


async def test_snapshot_restores_its_moment_and_delete_waits_for_users(node: Node) -> None:
    source = spec()
    sandbox = await node.lifecycle.create(source)
    token = source.envd_access_token
    await sh(node.session, sandbox.host, token, "echo before > /root/f1")
    snapshot = await node.lifecycle.create_snapshot(source.sandbox_id, "named")
    assert [m.names for m in node.lifecycle.snapshots.listed(source.sandbox_id)] == [["named"]]
    # The source continues, on a new layer.
    await sh(node.session, sandbox.host, token, "echo after > /root/f2")
    restored_spec = spec(template_id=snapshot.snapshot_id)
    restored = await node.lifecycle.create(restored_spec)
    rtoken = restored_spec.envd_access_token
    assert await sh(node.session, restored.host, rtoken, "cat /root/f1") == "before\n"
    assert await sh(node.session, restored.host, rtoken, "ls /root") == "f1\n"
    # Deleting it while `restored` stands on its disk layer: gone from the list, disk kept.
    node.lifecycle.delete_snapshot(snapshot.snapshot_id)
    assert node.lifecycle.snapshots.listed() == []
    with pytest.raises(NotFound):
        await node.lifecycle.create(spec(template_id=snapshot.snapshot_id))
    assert node.lifecycle.layers.path(snapshot.layers[0]).is_file()
    await node.lifecycle.pause(restored_spec.sandbox_id)
    restored = await node.lifecycle.resume(restored_spec.sandbox_id)
    assert await sh(node.session, restored.host, rtoken, "cat /root/f1") == "before\n"
    await node.lifecycle.kill(restored_spec.sandbox_id)
    await node.lifecycle.kill(source.sandbox_id)
    assert list(node.lifecycle.layers.root.glob("*")) == []


async def test_fork_children_share_the_past_and_diverge(node: Node) -> None:
    parent_spec = spec()
    parent = await node.lifecycle.create(parent_spec)
    ptoken = parent_spec.envd_access_token
    await start_counter(node.session, parent.host, ptoken)
    await sh(node.session, parent.host, ptoken, "echo shared > /root/before")
    _, at_fork = await counter(node.session, parent.host, ptoken)
    started = time.monotonic()
    results = await node.lifecycle.fork(parent_spec.sandbox_id, CHILDREN)
    fork_s = time.monotonic() - started
    children = [r.sandbox for r in results]
    assert all(r.HasField("sandbox") for r in results), results
    assert len({c.sandbox_id for c in children} | {parent_spec.sandbox_id}) == CHILDREN + 1
    assert len({c.envd_access_token for c in children}) == CHILDREN
    hosts = [node.manager.get(c.sandbox_id).host for c in children]
    await sh(node.session, hosts[0], children[0].envd_access_token, "echo mine > /root/after")
    for k, (child, host) in enumerate(zip(children, hosts, strict=True)):
        token = child.envd_access_token
        assert await sh(node.session, host, token, "ls /root") == (
            "after\nbefore\n" if k == 0 else "before\n")
        await sh(node.session, host, token, f"echo {k + 2} > /tmp/step")
    assert await sh(node.session, parent.host, ptoken, "ls /root") == "before\n"
    # Each child's in-memory counter started from the parent's and now runs at its own pace;
    # their RNGs were reseeded independently.
    await node.lifecycle.kill(parent_spec.sandbox_id)  # children stay undisturbed
    await asyncio.sleep(2)
    values = []
    for child, host in zip(children, hosts, strict=True):
        _, value = await counter(node.session, host, child.envd_access_token)
        assert value > at_fork
        values.append(value)
    assert len(set(values)) > CHILDREN // 2
    randoms = {await sh(node.session, h, c.envd_access_token, "head -c 16 /dev/urandom | od -x")
               for c, h in zip(children, hosts, strict=True)}
    assert len(randoms) == CHILDREN
    print(f"fork into {CHILDREN} children: {fork_s:.2f}s")


async def test_fork_with_failing_children_reports_them_and_leaks_nothing(node: Node) -> None:
    parent_spec = spec()
    await node.lifecycle.create(parent_spec)
    ids = ["forkgood1", parent_spec.sandbox_id, "forkgood2", "Bad-Id!"]
    results = await node.lifecycle.fork(parent_spec.sandbox_id, len(ids), child_ids=ids)
    assert [r.WhichOneof("result") for r in results] == ["sandbox", "error", "sandbox", "error"]
    assert results[1].error.code == 409 and results[3].error.code == 400
    assert sorted(sbx.record.sandbox_id for sbx in node.manager.all()) == sorted(
        [parent_spec.sandbox_id, "forkgood1", "forkgood2"])
    assert len(netns_with(node.prefix)) == 3 and len(qemus_under(node.state_dir)) == 3
    assert sorted(p.name for p in (node.state_dir / "sandboxes").iterdir()) == sorted(
        [parent_spec.sandbox_id, "forkgood1", "forkgood2"])
    assert node.lifecycle.snapshots.listed() == []  # the fork's capture is internal


async def test_reset_rewinds_in_place(node: Node) -> None:
    s = spec()
    sandbox = await node.lifecycle.create(s)
    token = s.envd_access_token
    await sh(node.session, sandbox.host, token, "echo 1 > /root/episode")
    snapshot = await node.lifecycle.create_snapshot(s.sandbox_id)
    for _ in range(2):
        await sh(node.session, sandbox.host, token, "echo 2 > /root/episode; touch /root/junk")
        record = await node.lifecycle.reset(s.sandbox_id, snapshot.snapshot_id)
        assert record.sandbox_id == s.sandbox_id
        assert record.state == cluster_pb2.SANDBOX_STATE_RUNNING
        assert await sh(node.session, sandbox.host, token, "ls /root; cat /root/episode") == (
            "episode\n1\n")
