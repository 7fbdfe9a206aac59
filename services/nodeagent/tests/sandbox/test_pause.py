"""Pause and resume: a filesystem pause keeps the directory and flushed disk, frees the VM and
slot; its resume cold-boots there; a resume that fails leaves the sandbox paused and intact."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import (
    AenvError,
    Conflict,
    DeadlineExceeded,
    Internal,
    NotFound,
    Unavailable,
)
from aenv_nodeagent.sandbox.model import BOOT_RAM, PAUSED_MARKER, PAUSED_STATE, Paused
from aenv_nodeagent.vmm.errors import CaptureLostVm

from .conftest import FILESYSTEM, PAUSED, RUNNING, Wing

FULL = cluster_pb2.PAUSE_MODE_UNSPECIFIED


async def test_a_filesystem_pause_and_resume(wing: Wing) -> None:
    sandbox = await wing.create()
    sandbox_id, directory = sandbox.sandbox_id, sandbox.directory
    first_vm = wing.vm(sandbox)

    record = await wing.service.pauses.pause(sandbox_id, FILESYSTEM)

    assert (record.state, record.pause_mode) == (PAUSED, FILESYSTEM)
    assert wing.service.registry.paused_ids() == [sandbox_id]
    assert not wing.service.guest_metrics.is_running(sandbox_id)
    with pytest.raises(NotFound):
        wing.service.registry.get(sandbox_id)
    assert wing.service.registry.record(sandbox_id).state == PAUSED
    assert wing.records.states(sandbox_id) == [RUNNING, PAUSED]
    # The guest flushed its disk first; the marker holds the record and chain for a restart.
    assert [c.method for c in wing.envd.calls][-1] == "sync"
    marked = Paused.read(directory / PAUSED_MARKER)
    assert marked.record == record
    assert (marked.chain.template_id, marked.chain.layers, marked.chain.active) == (
        "base", [], "disk.qcow2")
    # The VM quits and the slot goes in the background.
    await wing.settled()
    assert first_vm.stopping
    assert wing.network.live == []
    assert (directory / "disk.qcow2").is_file()

    resumed = await wing.service.pauses.resume(sandbox_id)

    assert wing.service.registry.get(sandbox_id) is resumed
    assert wing.service.registry.paused_ids() == []
    assert resumed.directory == directory
    assert not (directory / PAUSED_MARKER).exists()
    assert wing.records.states(sandbox_id) == [RUNNING, PAUSED, RUNNING]
    assert wing.records.records[sandbox_id].pause_mode == FULL
    assert "boot" in resumed.timings_ms and "restore" not in resumed.timings_ms
    # A cold boot of the template's kernel on the sandbox's own overlay, in a new slot.
    [_, vm] = wing.driver.launched
    assert vm is wing.vm(resumed)
    assert not vm.incoming and "restore" not in vm.methods_called
    assert vm.spec.disks[0].path == directory / "disk.qcow2"
    assert vm.spec.mem_path == directory / BOOT_RAM
    assert wing.network.live == [resumed.slot]
    assert len(wing.network.created) == 2  # taken anew (the first one may be reused)
    # The guest is handed the sandbox's own token again.
    assert wing.envd.calls[-1].access_token == sandbox.record.envd_access_token


async def test_a_resume_boots_on_the_overlay_last_written(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    active = wing.service.registry.chain(sandbox.sandbox_id).active
    assert active != "disk.qcow2"

    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id)

    assert wing.vm(resumed).spec.disks[0].path == sandbox.directory / active
    assert wing.service.registry.chain(sandbox.sandbox_id).active == active


def fail_launch(wing: Wing) -> None:
    wing.driver.launch_failures.append(Internal("QEMU failed to start"))


def fail_envd(wing: Wing) -> None:
    wing.envd.fail_on["init"] = DeadlineExceeded("envd did not answer /init within 60s")


def fail_publish(wing: Wing) -> None:
    wing.records.put_failures.append(Unavailable("etcd is unavailable"))


@pytest.mark.parametrize(("arrange", "launches"), [
    pytest.param(fail_launch, False, id="launch"),
    pytest.param(fail_envd, True, id="envd"),
    pytest.param(fail_publish, True, id="publish"),
])
async def test_a_failed_resume_leaves_it_paused_and_intact(
    wing: Wing, arrange: Callable[[Wing], None], launches: bool
) -> None:
    sandbox = await wing.create()
    sandbox_id, directory = sandbox.sandbox_id, sandbox.directory
    await wing.service.pauses.pause(sandbox_id, FILESYSTEM)
    await wing.settled()
    arrange(wing)

    with pytest.raises(AenvError, match="stays paused"):
        await wing.service.pauses.resume(sandbox_id)

    assert wing.service.registry.paused_ids() == [sandbox_id]
    assert not wing.service.guest_metrics.is_running(sandbox_id)
    assert not wing.service.registry.is_busy(sandbox_id)
    assert (directory / PAUSED_MARKER).is_file()
    assert (directory / "disk.qcow2").is_file()
    assert wing.records.records[sandbox_id].state == PAUSED
    assert wing.network.live == []
    assert len(wing.driver.launched) == 1 + launches
    assert all(vm.stopping for vm in wing.driver.launched)

    # Intact: it resumes once the fault is gone.
    wing.envd.fail_on.clear()
    resumed = await wing.service.pauses.resume(sandbox_id)
    assert wing.records.records[sandbox_id].state == RUNNING
    assert wing.network.live == [resumed.slot]


async def test_pause_and_resume_refuse_what_is_not_theirs(wing: Wing) -> None:
    sandbox = await wing.create()
    with pytest.raises(Conflict):
        await wing.service.pauses.resume(sandbox.sandbox_id)  # running
    with pytest.raises(NotFound):
        await wing.service.pauses.resume("nosuch")
    with pytest.raises(NotFound):
        await wing.service.pauses.pause("nosuch")
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    with pytest.raises(Conflict):
        await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)  # paused already
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING, PAUSED]


async def test_a_resume_waits_for_the_paused_vm_to_quit(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    # No settling: the quit still runs in the background.
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id)
    assert wing.vm(sandbox).stopping
    await wing.network.settled()
    assert wing.network.live == [resumed.slot]


async def test_a_full_pause_of_a_guest_on_no_image_captures_it_whole(wing: Wing) -> None:
    # A FakeVm maps no memory image (its pid is no process): the pause takes a full capture.
    sandbox = await wing.create()
    record = await wing.service.pauses.pause(sandbox.sandbox_id)
    assert (record.state, record.pause_mode) == (PAUSED, FULL)
    assert (sandbox.directory / PAUSED_STATE).is_file()
    assert "capture" in wing.vm(sandbox).methods_called
    await wing.settled()
    assert wing.network.live == []

    # The capture is no QEMU stream: a restore of it fails, and the sandbox stays paused.
    with pytest.raises(AenvError, match="stays paused"):
        await wing.service.pauses.resume(sandbox.sandbox_id)
    assert wing.service.registry.paused_ids() == [sandbox.sandbox_id]
    assert (sandbox.directory / PAUSED_STATE).is_file()
    assert wing.network.live == []
    # A cold boot brings it back, and drops the capture.
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id, reboot=True)
    assert not wing.vm(resumed).incoming
    assert not (sandbox.directory / PAUSED_STATE).exists()
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING, PAUSED, RUNNING]


async def test_a_pause_whose_guest_cannot_flush_leaves_it_running(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.envd.fail_on["sync"] = Unavailable("the guest agent did not answer")
    with pytest.raises(Unavailable):
        await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    assert wing.service.registry.get(sandbox.sandbox_id) is sandbox
    assert wing.service.registry.paused_ids() == []
    assert not (sandbox.directory / PAUSED_MARKER).exists()
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING]
    assert not wing.vm(sandbox).stopping
    assert wing.network.live == [sandbox.slot]


async def test_a_pause_whose_capture_fails_leaves_it_running(wing: Wing) -> None:
    sandbox = await wing.create()
    vm = wing.vm(sandbox)
    vm.fail_on["capture"] = Internal("QMP migrate failed")
    with pytest.raises(Internal):
        await wing.service.pauses.pause(sandbox.sandbox_id)
    assert wing.service.registry.get(sandbox.sandbox_id) is sandbox
    assert not (sandbox.directory / PAUSED_STATE).exists()
    assert not (sandbox.directory / PAUSED_MARKER).exists()
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING]
    assert await vm.status() == "running" and not vm.stopping
    assert wing.network.live == [sandbox.slot]


async def test_a_pause_whose_capture_lost_the_vm_does_not_try_to_run_it_on(wing: Wing) -> None:
    sandbox = await wing.create()
    vm = wing.vm(sandbox)
    vm.fail_on["capture"] = CaptureLostVm("QMP migrate: lost QEMU")
    with pytest.raises(CaptureLostVm):
        await wing.service.pauses.pause(sandbox.sandbox_id)
    assert vm.methods_called[-1] == "capture"  # neither asked its state nor resumed
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING]


async def test_a_resume_gives_the_sandbox_its_new_timeout(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    started = time.time()
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id, timeout_s=60)
    end = resumed.record.end_at.ToNanoseconds() / 1e9
    assert started + 60 <= end <= time.time() + 60
    assert wing.records.records[sandbox.sandbox_id].end_at == resumed.record.end_at


async def test_a_pause_that_raises_leaves_node_and_cluster_agreeing(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.records.put_failures.append(Unavailable("etcd is unavailable"))
    with pytest.raises(Unavailable):
        await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    # Its docstring: the sandbox runs on when the pause raises. Either way, both sides agree.
    assert wing.service.registry.record(sandbox.sandbox_id).state == (
        wing.records.records[sandbox.sandbox_id].state)
