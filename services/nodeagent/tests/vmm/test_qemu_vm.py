"""Real QEMU microVMs under the host's accelerator: launch, capture, restore, shutdown, failures."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.vmm import DiskSpec, QemuVm, VmSpec
from aenv_nodeagent.vmm.errors import CaptureFailed, MigrationError, VmExited, VmStartError

from .conftest import Launcher, processes_mentioning, with_disk
from .guest import BOOT_MARKER, qemu_img_create, ticks, wait_for_tick

pytestmark = pytest.mark.vm

# Under TCG a cold boot of the ticker guest takes a few seconds; a loaded CI box needs margin.
BOOT_LIMIT_S = 90.0


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


async def test_launch_runs_guest_and_reports_status(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    # `env` execs QEMU like `ip netns exec` does, so it exercises argv_prefix and the pid check.
    vm = await launch(ticker_spec, "vm", argv_prefix=("env", "AENV_VMM_TEST=1"))

    assert await vm.status() == "running"
    assert vm.files.pidfile.read_text().strip() == str(vm.pid)
    assert vm.timings["exec_to_qmp"] > 0
    await wait_for_tick(scratch / "vm.log", at_least=1, time_limit=BOOT_LIMIT_S)
    assert BOOT_MARKER in (scratch / "vm.log").read_text()

    await vm.pause()
    assert await vm.status() == "paused"
    await vm.resume()
    assert await vm.status() == "running"


async def test_restore_is_refused_without_incoming_or_state_file(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    running = await launch(ticker_spec, "running")
    with pytest.raises(Conflict):
        await running.restore(scratch / "state")

    waiting = await launch(dataclasses.replace(ticker_spec, mem_shared=False), "waiting",
                           incoming=True)
    assert await waiting.status() == "inmigrate"
    with pytest.raises(NotFound):
        await waiting.restore(scratch / "missing-state")
    assert await waiting.status() == "inmigrate"  # still usable: nothing reached QEMU


async def test_capture_then_restore_copy_on_write_children_continue_guest(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    base = qemu_img_create(scratch / "base.raw", "raw")
    source_overlay = qemu_img_create(scratch / "source.qcow2", "qcow2", backing=(base, "raw"))
    source_spec = with_disk(ticker_spec, DiskSpec("root", source_overlay, "qcow2", readonly=False))
    source = await launch(source_spec, "source")
    await wait_for_tick(scratch / "source.log", at_least=5, time_limit=BOOT_LIMIT_S)

    capture_phases = await source.capture(scratch / "state")

    assert set(capture_phases) == {"stop", "migrate"}
    assert await source.status() == "postmigrate"
    # x-ignore-shared: RAM stays in the memory file, the device state is tens of KB.
    assert 0 < (scratch / "state").stat().st_size < 1 << 20
    last_tick_before = ticks(scratch / "source.log")[-1]
    await source.shutdown()
    frozen_ram = sha256(source_spec.mem_path)

    # Two children (a fork) map the frozen RAM copy-on-write, each on its own overlay over the
    # frozen disk layer, each with its own console: same devices, different files.
    children = []
    for name in ("child1", "child2"):
        overlay = qemu_img_create(scratch / f"{name}.qcow2", "qcow2",
                                  backing=(source_overlay, "qcow2"))
        child_spec = with_disk(dataclasses.replace(source_spec, mem_shared=False),
                               DiskSpec("root", overlay, "qcow2", readonly=False))
        child = await launch(child_spec, name, incoming=True)
        restore_phases = await child.restore(scratch / "state")
        assert set(restore_phases) == {"migrate_incoming", "cont"}
        assert await child.status() == "running"
        children.append((name, child))

    for name, child in children:
        console = scratch / f"{name}.log"
        after = await wait_for_tick(console, at_least=last_tick_before + 5,
                                    time_limit=BOOT_LIMIT_S)
        # The counter continues where it was: the guest resumed, it did not boot again.
        assert BOOT_MARKER not in console.read_text()
        assert after[0] >= last_tick_before
        await child.pause()
    assert sha256(source_spec.mem_path) == frozen_ram  # MAP_PRIVATE left the file untouched


async def test_shutdown_reaps_and_removes_files_idempotently(
    launch: Launcher, ticker_spec: VmSpec
) -> None:
    vm = await launch(ticker_spec, "vm")
    assert vm.files.qmp_socket.exists()

    await vm.shutdown()
    await vm.shutdown()

    assert vm.exit_code is not None
    assert processes_mentioning(str(vm.files.qmp_socket)) == []
    assert [path for path in vm.files.all() if path.exists()] == []


async def test_failed_start_raises_a_start_error_with_stderr_and_leaks_nothing(
    ticker_spec: VmSpec, scratch: Path
) -> None:
    missing = scratch / "no-such-disk.qcow2"
    spec = with_disk(ticker_spec, DiskSpec("root", missing, "qcow2", readonly=False))

    with pytest.raises(VmStartError) as failure:
        await QemuVm.launch(spec, scratch / "vm", incoming=False, console_log=scratch / "vm.log")

    assert str(missing) in failure.value.message  # QEMU's own complaint, from its stderr
    assert processes_mentioning(str(scratch / "vm")) == []
    assert list((scratch / "vm").iterdir()) == []


async def test_restore_of_corrupt_state_raises_by_kind_when_qemu_exits(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    (scratch / "state").write_bytes(b"not a migration stream")
    waiting = await launch(ticker_spec, "waiting", incoming=True)

    with pytest.raises((VmExited, MigrationError)) as failure:
        await waiting.restore(scratch / "state", time_limit=30.0)

    # QEMU gives up on a failed incoming migration; its own complaint reaches the caller.
    assert "exited" in failure.value.message
    assert "load of migration failed" in failure.value.message
    assert waiting.exit_code is not None


async def test_failed_capture_raises_and_vm_can_resume(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    vm = await launch(ticker_spec, "vm")

    with pytest.raises(NotFound):
        await vm.capture(scratch / "no-such-dir" / "state")

    assert await vm.status() == "paused"
    await vm.resume()
    assert await vm.status() == "running"


async def test_capture_write_error_fails_migration_and_vm_can_resume(
    launch: Launcher, ticker_spec: VmSpec
) -> None:
    vm = await launch(ticker_spec, "vm")

    with pytest.raises(CaptureFailed) as failure:  # recoverable: the VM is as it was
        await vm.capture(Path("/dev/full"))  # every write fails with ENOSPC

    assert "migrate failed" in failure.value.message
    assert Path("/dev/full").exists()  # a failed capture removes only regular files
    assert await vm.status() == "paused"
    await vm.resume()
    assert await vm.status() == "running"
