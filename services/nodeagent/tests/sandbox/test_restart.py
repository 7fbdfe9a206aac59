"""A restarted node agent takes back what the last one left on disk: paused sandboxes from their
markers, snapshots and the layers they stand on; the layers nothing stands on go."""

from __future__ import annotations

from aenv_nodeagent.sandbox.model import PAUSED_MARKER

from .conftest import FILESYSTEM, PAUSED, RUNNING, Wing


async def test_a_paused_sandbox_is_taken_back_and_resumes(wing: Wing) -> None:
    sandbox = await wing.create()
    sandbox_id, directory = sandbox.sandbox_id, sandbox.directory
    await wing.service.pauses.pause(sandbox_id, FILESYSTEM)

    successor = await wing.restart()
    assert successor.service.registry.paused_ids() == []  # nothing before it loads
    assert successor.service.takeback.load() == [sandbox_id]

    assert successor.service.registry.paused_ids() == [sandbox_id]
    record = successor.service.registry.record(sandbox_id)
    assert (record.state, record.pause_mode) == (PAUSED, FILESYSTEM)
    assert record.envd_access_token == sandbox.record.envd_access_token
    assert successor.service.registry.all() == []

    resumed = await successor.service.pauses.resume(sandbox_id)
    assert resumed.directory == directory
    assert not (directory / PAUSED_MARKER).exists()
    assert wing.records.states(sandbox_id) == [RUNNING, PAUSED, RUNNING]
    [vm] = successor.driver.launched
    assert not vm.incoming and vm.spec.disks[0].path == directory / "disk.qcow2"
    assert successor.network.live == [resumed.slot]


async def test_snapshots_and_their_layers_are_taken_back(wing: Wing) -> None:
    sandbox = await wing.create()
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    (wing.state_dir / "layers" / "layer-stray.qcow2").touch()  # stood on by nothing

    successor = await wing.restart()
    successor.service.takeback.load()

    assert successor.service.snapshots.store.find(meta.snapshot_id) == meta
    assert successor.layer_files() == set(meta.layers)
    chain = successor.service.registry.paused(sandbox.sandbox_id)
    assert chain is not None and chain.chain.layers == meta.layers
    child = await successor.create(template_id=meta.snapshot_id)
    assert successor.service.registry.chain(child.sandbox_id).layers == meta.layers


async def test_an_unreadable_marker_is_skipped(wing: Wing) -> None:
    kept = await wing.create()
    await wing.service.pauses.pause(kept.sandbox_id, FILESYSTEM)
    broken = wing.directory("broken")
    broken.mkdir()
    (broken / PAUSED_MARKER).write_text("{not json")

    successor = await wing.restart()
    assert successor.service.takeback.load() == [kept.sandbox_id]


async def test_a_killed_sandbox_is_not_taken_back(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.service.kills.kill(sandbox.sandbox_id)
    successor = await wing.restart()
    assert successor.service.takeback.load() == []
