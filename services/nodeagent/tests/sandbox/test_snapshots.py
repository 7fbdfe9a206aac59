"""Filesystem-only snapshots: the frozen layer, the sandbox's new overlay, the published record,
creates from it, its deletion, the layers' collection and their compaction."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import SNAPSHOTS
from aenv_common.errors import Conflict, Internal, NotFound, Unavailable
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.snapshots.store import SNAPSHOT_META, SnapshotMeta
from aenv_nodeagent.templates.model import ROOT_NODE
from aenv_nodeagent.vmm.errors import CaptureLostVm

from .conftest import FILESYSTEM, NODE_ID, TEMPLATE, Wing


async def published(wing: Wing, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
    return await wing.records.get_record(SNAPSHOTS, snapshot_id, cluster_pb2.SnapshotRecord)


async def snapshot(wing: Wing, sandbox: Sandbox, name: str = "") -> SnapshotMeta:
    return await wing.service.snapshots.create(sandbox.sandbox_id, name, filesystem_only=True)


async def test_a_snapshot_freezes_the_overlay_into_a_layer(wing: Wing) -> None:
    sandbox = await wing.create()
    vm = wing.vm(sandbox)

    meta = await snapshot(wing, sandbox, "before")

    [layer] = meta.layers
    assert not meta.has_memory and not meta.hidden
    assert wing.layer_files() == {layer}
    assert (meta.directory / SNAPSHOT_META).is_file()
    assert wing.service.snapshots.store.find(meta.snapshot_id) is meta
    # The sandbox continues on a new overlay over the layer; what it wrote is in the layer.
    chain = wing.service.registry.chain(sandbox.sandbox_id)
    assert chain.layers == [layer]
    assert chain.active == f"{layer}.active.qcow2" and chain.top_node == "ovl1"
    active = sandbox.directory / chain.active
    [switch] = [call for call in vm.calls if call.method == "switch_disk_to_overlay"]
    assert switch.arguments == {"top_node": ROOT_NODE, "new_node": "ovl1", "overlay": active}
    layer_file = wing.service.context.disk.store.path(layer)
    assert vm.chains["root"].top_file == active
    assert vm.chains["root"].backing_files == [layer_file, wing.template.disk]
    assert layer_file.samefile(sandbox.directory / "disk.qcow2")  # frozen in place
    assert await vm.status() == "running"
    assert [c.method for c in wing.envd.calls][-1] == "sync"  # flushed before the freeze
    # Published for the cluster.
    record = await published(wing, meta.snapshot_id)
    assert record is not None
    assert (record.node_id, record.sandbox_id, record.template_id) == (
        NODE_ID, sandbox.sandbox_id, TEMPLATE)
    assert list(record.names) == ["before"] and not record.has_memory
    assert record.resources.memory_mib == 128


async def test_a_second_snapshot_stacks_on_the_first(wing: Wing) -> None:
    sandbox = await wing.create()
    first = await snapshot(wing, sandbox)
    second = await snapshot(wing, sandbox)
    assert second.layers == [second.layers[0], *first.layers]
    chain = wing.service.registry.chain(sandbox.sandbox_id)
    assert chain.layers == second.layers and chain.top_node == "ovl2"
    assert wing.layer_files() == set(second.layers)


async def test_a_create_from_a_snapshot_boots_over_its_layer(wing: Wing) -> None:
    parent = await wing.create()
    meta = await snapshot(wing, parent)

    child = await wing.create(template_id=meta.snapshot_id)

    [layer] = meta.layers
    vm = wing.vm(child)
    assert not vm.incoming and "restore" not in vm.methods_called
    assert "boot" in child.timings_ms
    assert vm.spec.disks[0].path == child.directory / "disk.qcow2"
    layers = wing.service.context.disk.store
    assert vm.chains["root"].backing_files == [layers.path(layer), wing.template.disk]
    assert wing.service.registry.chain(child.sandbox_id).layers == [layer]
    record = wing.records.records[child.sandbox_id]
    assert (record.template_id, record.base_template_id) == (meta.snapshot_id, TEMPLATE)
    assert wing.network.live == [parent.slot, child.slot]


async def test_a_deleted_snapshot_keeps_its_layer_while_a_sandbox_stands_on_it(
    wing: Wing
) -> None:
    parent = await wing.create()
    meta = await snapshot(wing, parent)
    child = await wing.create(template_id=meta.snapshot_id)
    [layer] = meta.layers

    await wing.service.snapshots.delete(meta.snapshot_id)

    assert await published(wing, meta.snapshot_id) is None
    assert wing.service.snapshots.store.find(meta.snapshot_id) is None
    assert not meta.directory.exists()
    assert wing.layer_files() == {layer}
    await wing.service.kills.kill(parent.sandbox_id)
    assert wing.layer_files() == {layer}  # the child stands on it
    await wing.service.kills.kill(child.sandbox_id)
    assert wing.layer_files() == set()


async def test_a_paused_sandbox_holds_its_layers_too(wing: Wing) -> None:
    sandbox = await wing.create()
    meta = await snapshot(wing, sandbox)
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.service.snapshots.delete(meta.snapshot_id)
    assert wing.layer_files() == set(meta.layers)
    await wing.service.kills.kill(sandbox.sandbox_id)
    assert wing.layer_files() == set()


async def test_a_snapshot_nothing_stands_on_any_more_is_collected_at_its_deletion(
    wing: Wing
) -> None:
    sandbox = await wing.create()
    meta = await snapshot(wing, sandbox)
    await wing.service.kills.kill(sandbox.sandbox_id)
    assert wing.layer_files() == set(meta.layers)  # the snapshot stands on it
    await wing.service.snapshots.delete(meta.snapshot_id)
    assert wing.layer_files() == set()


async def test_a_failed_capture_leaves_the_sandbox_as_it_was(wing: Wing) -> None:
    sandbox = await wing.create()
    vm = wing.vm(sandbox)
    vm.fail_on["switch_disk_to_overlay"] = Internal("QMP blockdev-snapshot failed")
    before = {path.name for path in sandbox.directory.iterdir()}

    with pytest.raises(Internal):
        await snapshot(wing, sandbox)

    chain = wing.service.registry.chain(sandbox.sandbox_id)
    assert (chain.layers, chain.active, chain.top_node) == ([], "disk.qcow2", ROOT_NODE)
    assert wing.layer_files() == set()
    assert {path.name for path in sandbox.directory.iterdir()} == before
    assert wing.service.snapshots.store.listed() == []
    assert list((wing.state_dir / "snapshots").iterdir()) == []
    assert wing.records.by_kind.get(SNAPSHOTS, {}) == {}
    assert await vm.status() == "running"
    assert not wing.service.registry.is_busy(sandbox.sandbox_id)


async def test_a_snapshot_whose_capture_lost_the_vm_does_not_try_to_run_it_on(
    wing: Wing,
) -> None:
    sandbox = await wing.create()
    vm = wing.vm(sandbox)
    vm.fail_on["capture"] = CaptureLostVm("QMP migrate: lost QEMU")
    with pytest.raises(CaptureLostVm):  # not hidden behind a failed resume
        await wing.service.snapshots.create(sandbox.sandbox_id, "")
    assert vm.methods_called[-1] == "capture"  # neither asked its state nor resumed
    assert wing.service.snapshots.store.listed() == []


async def test_a_guest_that_cannot_flush_is_not_snapshotted(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.envd.fail_on["sync"] = Unavailable("the guest agent did not answer")
    with pytest.raises(Unavailable):
        await snapshot(wing, sandbox)
    assert "pause" not in wing.vm(sandbox).methods_called
    assert list((wing.state_dir / "snapshots").iterdir()) == []
    assert not any(sandbox.directory.glob("*.active.qcow2"))


async def test_a_snapshot_of_other_template_inputs_is_refused_before_any_work(
    wing: Wing
) -> None:
    parent = await wing.create()
    meta = await snapshot(wing, parent)
    inputs = wing.templates.inputs(TEMPLATE)
    wing.templates.register(dataclasses.replace(
        inputs, artifacts=dataclasses.replace(inputs.artifacts, digest="0" * 64)))
    slots = len(wing.network.created)

    with pytest.raises(Conflict):
        await wing.create(template_id=meta.snapshot_id)
    assert len(wing.network.created) == slots
    assert len(wing.driver.launched) == 1


async def test_deleting_a_snapshot_the_node_lost_withdraws_its_record(wing: Wing) -> None:
    sandbox = await wing.create()
    meta = await snapshot(wing, sandbox)
    wing.service.snapshots.store.remove(meta.snapshot_id)  # lost (its record's withdrawal failed)

    with pytest.raises(NotFound):
        await wing.service.snapshots.delete(meta.snapshot_id)
    assert await published(wing, meta.snapshot_id) is None


# --- compaction ----------------------------------------------------------------------------------

async def test_layers_past_max_layers_are_merged_into_the_overlay(wing: Wing) -> None:
    wing.service.context.disk.max_layers = 1
    sandbox = await wing.create()
    vm = wing.vm(sandbox)
    first = await snapshot(wing, sandbox)
    assert "stream_disk" not in vm.methods_called  # one layer is not past the limit
    second = await snapshot(wing, sandbox)

    await wing.service.context.disk.compacted(sandbox.sandbox_id)

    [stream] = [call for call in vm.calls if call.method == "stream_disk"]
    chain = wing.service.registry.chain(sandbox.sandbox_id)
    assert stream.arguments["top_node"] == chain.top_node == "ovl2"
    assert stream.arguments["base"] == wing.template.disk
    assert chain.layers == []
    assert vm.chains["root"].backing_files == [wing.template.disk]
    # The snapshots still stand on the layers; once they go, nothing does.
    assert wing.layer_files() == set(second.layers)
    await wing.service.snapshots.delete(first.snapshot_id)
    await wing.service.snapshots.delete(second.snapshot_id)
    assert wing.layer_files() == set()
    assert await vm.status() == "running"


async def test_a_compaction_collects_the_layers_nobody_else_uses(wing: Wing) -> None:
    wing.service.context.disk.max_layers = 1
    sandbox = await wing.create()
    first = await snapshot(wing, sandbox)
    second = await snapshot(wing, sandbox)
    # Held before it ran: a compaction starts by looking up the template's disk.
    wing.templates.gets_open.clear()
    await wing.service.snapshots.delete(first.snapshot_id)
    await wing.service.snapshots.delete(second.snapshot_id)
    assert wing.layer_files() == set(second.layers)  # the sandbox stands on them until merged

    wing.templates.gets_open.set()
    await asyncio.wait_for(wing.service.context.disk.compacted(sandbox.sandbox_id), 5)

    assert wing.service.registry.chain(sandbox.sandbox_id).layers == []
    assert wing.layer_files() == set()


async def test_a_snapshot_waits_for_a_running_compaction(wing: Wing) -> None:
    wing.service.context.disk.max_layers = 1
    sandbox = await wing.create()
    await snapshot(wing, sandbox)
    await snapshot(wing, sandbox)
    wing.templates.gets_open.clear()  # the compaction it started is held
    third = asyncio.ensure_future(snapshot(wing, sandbox))
    await asyncio.sleep(0.01)
    assert not third.done()  # queued behind the compaction, not refused

    wing.templates.gets_open.set()
    meta = await asyncio.wait_for(third, 5)
    assert len(meta.layers) == 1  # over the merged overlay: its own layer only


async def test_a_failed_compaction_keeps_the_chain(wing: Wing) -> None:
    wing.service.context.disk.max_layers = 1
    sandbox = await wing.create()
    wing.vm(sandbox).fail_on["stream_disk"] = Internal("QMP block-stream failed")
    await snapshot(wing, sandbox)
    second = await snapshot(wing, sandbox)
    await wing.service.context.disk.compacted(sandbox.sandbox_id)
    assert wing.service.registry.chain(sandbox.sandbox_id).layers == second.layers
    assert wing.layer_files() == set(second.layers)


async def test_a_create_in_flight_holds_its_snapshots_layers(wing: Wing) -> None:
    parent = await wing.create()
    meta = await snapshot(wing, parent)
    await wing.service.kills.kill(parent.sandbox_id)  # the snapshot alone stands on its layer now
    released = wing.envd.hold("init")
    creating = asyncio.ensure_future(wing.create(template_id=meta.snapshot_id))
    await asyncio.wait_for(wing.envd.held("init"), 5)  # its VM runs over the layer

    await wing.service.snapshots.delete(meta.snapshot_id)
    released.set()
    child = await asyncio.wait_for(creating, 5)

    assert wing.service.registry.chain(child.sandbox_id).layers == meta.layers
    assert wing.layer_files() == set(meta.layers)
