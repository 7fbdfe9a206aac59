"""Reset to a filesystem snapshot (in place: same id, directory, slot and token), its failure
(the sandbox is gone), and a fork whose children cannot be restored (only the parent is left)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import cast

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.cluster import SNAPSHOTS
from aenv_common.errors import Conflict, Internal, NotFound
from aenv_nodeagent.sandbox.create import Creates
from aenv_nodeagent.sandbox.fork import Forks
from aenv_nodeagent.sandbox.restore import Restorer
from aenv_nodeagent.servicer import NodeAgentServicer, fork_result
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.templates.builds import TemplateBuilds

from .conftest import RUNNING, Wing


async def test_a_reset_boots_the_snapshot_in_place(wing: Wing) -> None:
    sandbox = await wing.create()
    sandbox_id = sandbox.sandbox_id
    meta = await wing.service.snapshots.create(sandbox_id, filesystem_only=True)
    later = await wing.service.snapshots.create(sandbox_id, filesystem_only=True)

    record = await wing.service.forks.reset(sandbox_id, meta.snapshot_id)

    reset = wing.service.registry.get(sandbox_id)
    assert reset is not sandbox
    assert (reset.directory, reset.slot) == (sandbox.directory, sandbox.slot)
    assert record.envd_access_token == sandbox.record.envd_access_token
    assert wing.network.live == [sandbox.slot] and len(wing.network.created) == 1
    assert wing.vm(sandbox).stopping
    vm = wing.vm(reset)
    assert not vm.incoming
    layers = wing.service.context.disk.store
    assert vm.chains["root"].backing_files[0] == layers.path(meta.layers[0])
    chain = wing.service.registry.chain(sandbox_id)
    assert (chain.layers, chain.active) == (meta.layers, "disk.qcow2")
    assert not any(sandbox.directory.glob("*.active.qcow2"))  # the old overlays are gone
    assert wing.records.states(sandbox_id) == [RUNNING, RUNNING]
    assert {"quit", "overlay", "boot", "publish"} <= set(reset.timings_ms)
    # Both snapshots still stand on their layers.
    assert wing.layer_files() == set(later.layers)


async def test_a_failed_reset_leaves_nothing_of_the_sandbox(wing: Wing) -> None:
    sandbox = await wing.create()
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    wing.driver.launch_failures.append(Internal("QEMU failed to start"))

    with pytest.raises(Internal):
        await wing.service.forks.reset(sandbox.sandbox_id, meta.snapshot_id)

    assert not wing.service.registry.has(sandbox.sandbox_id)
    assert not sandbox.directory.exists()
    assert wing.network.live == []
    assert sandbox.sandbox_id not in wing.records.records
    assert wing.service.snapshots.store.find(meta.snapshot_id) is meta  # the snapshot stays
    assert wing.layer_files() == set(meta.layers)


async def test_a_reset_to_an_unknown_snapshot_touches_nothing(wing: Wing) -> None:
    sandbox = await wing.create()
    with pytest.raises(NotFound):
        await wing.service.forks.reset(sandbox.sandbox_id, "snap-nosuch")
    assert wing.service.registry.get(sandbox.sandbox_id) is sandbox
    assert not wing.vm(sandbox).stopping


async def test_a_fork_whose_children_fail_leaves_the_parent_alone(wing: Wing) -> None:
    # A FakeVm's capture is no QEMU stream: no memory image can be made of it for the children.
    parent = await wing.create()
    children = ["childa", "childb"]

    results = await wing.service.forks.fork(parent.sandbox_id, 2, child_ids=children)

    assert len(results) == 2 and all(isinstance(result, Internal) for result in results)
    assert wing.service.registry.all() == [parent]
    assert not wing.vm(parent).stopping
    assert wing.network.live == [parent.slot]
    for child in children:
        assert not wing.directory(child).exists()
        assert child not in wing.records.records
    # The fork's hidden capture is gone and was never published; its layer, which the parent
    # continues on, stays.
    assert wing.service.snapshots.store.listed() == []
    assert list((wing.state_dir / "snapshots").iterdir()) == []
    assert wing.records.by_kind.get(SNAPSHOTS, {}) == {}
    assert wing.layer_files() == set(wing.service.registry.chain(parent.sandbox_id).layers)


class CountingCreates:
    """Children restored one event-loop turn after another, the most at once counted."""

    def __init__(self) -> None:
        self.running = self.most = 0

    async def from_snapshot(
        self, snapshot: SnapshotMeta, spec: cluster_pb2.SandboxSpec, *,
        parent: Sequence[str] = (),
    ) -> object:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            raise Conflict(f"child {spec.sandbox_id} refused")
        finally:
            self.running -= 1


@pytest.mark.parametrize("at_once", [1, 2])
async def test_a_forks_children_are_restored_so_many_at_a_time_across_forks(
    wing: Wing, at_once: int
) -> None:
    first, second = await wing.create(), await wing.create()
    context = wing.service.context
    context = dataclasses.replace(context, settings=dataclasses.replace(
        context.settings, fork_restores_at_once=at_once))
    creates = CountingCreates()
    forks = Forks(context, wing.service.snapshots, cast(Creates, creates),
                  cast(Restorer, None))

    outcomes = await asyncio.gather(forks.fork(first.sandbox_id, 3),
                                    forks.fork(second.sandbox_id, 4))

    assert [len(children) for children in outcomes] == [3, 4]
    assert all(isinstance(child, Conflict) for children in outcomes for child in children)
    assert creates.most == at_once


async def test_the_grpc_edge_tells_each_failed_child_by_its_kind(wing: Wing) -> None:
    parent = await wing.create()
    servicer = NodeAgentServicer(wing.service, cluster_pb2.NodeRecord,
                                 cast(TemplateBuilds, None))

    answer = await servicer.ForkSandbox(nodeagent_pb2.ForkSandboxRequest(
        sandbox_id=parent.sandbox_id, count=2), cast(grpc.aio.ServicerContext, None))

    assert [r.WhichOneof("result") for r in answer.results] == ["error", "error"]
    assert {r.error.status for r in answer.results} == {"INTERNAL"}
    assert all(r.error.message for r in answer.results)


def test_a_child_refused_by_kind_keeps_its_kind_and_message_on_the_wire() -> None:
    result = fork_result(Conflict("sandbox \"a\" already exists"))

    assert result.error.status == "FAILED_PRECONDITION"
    assert result.error.message == "sandbox \"a\" already exists"
