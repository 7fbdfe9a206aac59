"""FakeVm and FakeDriver implement the vmm seam and behave as QemuVm does where callers can tell."""

from __future__ import annotations

import asyncio
import inspect
import os
from pathlib import Path

import pytest

from aenv_common.errors import Conflict, Internal, NotFound
from aenv_nodeagent.vmm import (
    Accelerator,
    AcceleratorChoice,
    DiskSpec,
    QemuDriver,
    QemuVm,
    Vm,
    VmmDriver,
    VmSpec,
)
from aenv_nodeagent.vmm.errors import (
    CaptureFailed,
    QmpCommandFailed,
    QmpConnectionLost,
    VmExited,
    VmStartError,
)
from aenv_nodeagent.vmm.qemu_disks import DiskChain

from ..fakes.vm import FAKE_PID_BASE, STATE_MARKER, Call, FakeDriver, FakeVm
from .guest import qemu_img_create

TCG = AcceleratorChoice(Accelerator.TCG, "test")


def make_spec(tmp_path: Path, *disks: DiskSpec, preload: Path | None = None) -> VmSpec:
    return VmSpec(vcpus=1, memory_mib=128, kernel=tmp_path / "vmlinux", initrd=tmp_path / "initrd",
                  cmdline="console=ttyS0", disks=disks, net=None, mem_path=tmp_path / "guest.mem",
                  mem_shared=False, accel=TCG, preload_library=preload)


async def launch(driver: VmmDriver, spec: VmSpec, workdir: Path, *, incoming: bool = False) -> Vm:
    """Through the protocols only: mypy checks FakeDriver against VmmDriver here."""
    return await driver.launch(spec, workdir, incoming=incoming)


def _protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(protocol).items()
            if not name.startswith("_") and inspect.isfunction(member)}


def _protocol_properties(protocol: type) -> set[str]:
    return {name for name, member in vars(protocol).items() if isinstance(member, property)}


def test_the_fakes_and_qemu_implement_the_protocols_under_mypy() -> None:
    # Checked by mypy (scripts/typecheck.sh); at run time they are plain assignments.
    vm_classes: list[type[Vm]] = [FakeVm, QemuVm]
    drivers: list[VmmDriver] = [FakeDriver(), QemuDriver()]
    assert [driver.name for driver in drivers] == ["fake", "qemu"]
    assert vm_classes == [FakeVm, QemuVm]


@pytest.mark.parametrize("implementation", [FakeVm, QemuVm])
def test_vm_methods_have_the_protocols_signatures(implementation: type) -> None:
    methods = _protocol_methods(Vm)
    assert {"restore", "capture", "switch_disk_to_overlay", "shutdown"} <= set(methods)
    for name, declared in methods.items():
        member = getattr(implementation, name)
        assert inspect.iscoroutinefunction(member), name
        assert inspect.signature(member) == declared, name


async def test_vm_properties_exist_on_a_fake(tmp_path: Path) -> None:
    vm = await launch(FakeDriver(), make_spec(tmp_path), tmp_path / "vm")
    properties = _protocol_properties(Vm)
    assert properties == {"pid", "stopping", "logs_writes", "freezes", "cgroup"}
    assert {name: type(getattr(vm, name)) for name in properties} == {
        "pid": int, "stopping": bool, "logs_writes": bool, "freezes": bool,
        "cgroup": type(None)}  # a fake VM runs in no cgroup


async def test_launch_makes_the_workdir_and_a_vm_with_a_pid_no_process_has(tmp_path: Path) -> None:
    driver = FakeDriver()
    first = await driver.launch(make_spec(tmp_path), tmp_path / "deep" / "vm1", incoming=False)
    second = await driver.launch(make_spec(tmp_path), tmp_path / "vm2", incoming=True)

    assert driver.launched == [first, second]
    assert (tmp_path / "deep" / "vm1").is_dir()
    assert first.files.pidfile.read_text() == f"{first.pid}\n"
    assert first.files.stderr_log.exists()
    assert first.pid != second.pid
    for pid in (first.pid, second.pid):
        assert pid >= FAKE_PID_BASE
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert await first.status() == "running"
    assert await second.status() == "inmigrate"
    assert (first.logs_writes, first.stopping, first.freezes) == (False, False, False)
    with_log = await driver.launch(make_spec(tmp_path, preload=tmp_path / "lib.so"),
                                   tmp_path / "vm3", incoming=True)
    assert with_log.logs_writes


async def test_pause_resume_and_capture_follow_qemus_run_states(tmp_path: Path) -> None:
    vm = await launch(FakeDriver(), make_spec(tmp_path), tmp_path / "vm")

    await vm.pause()
    assert await vm.status() == "paused"
    await vm.pause()
    assert await vm.status() == "paused"
    await vm.resume()
    assert await vm.status() == "running"

    phases = await vm.capture(tmp_path / "state")
    assert set(phases) == {"stop", "migrate"}
    assert await vm.status() == "postmigrate"
    assert (tmp_path / "state").read_bytes().startswith(STATE_MARKER)
    await vm.resume()
    assert await vm.status() == "running"


async def test_failed_capture_leaves_the_vm_paused_and_no_state(tmp_path: Path) -> None:
    vm = await launch(FakeDriver(), make_spec(tmp_path), tmp_path / "vm")

    with pytest.raises(NotFound):
        await vm.capture(tmp_path / "no-such-dir" / "state")

    assert await vm.status() == "paused"
    assert not (tmp_path / "no-such-dir").exists()


async def test_device_state_needs_a_stopped_vm_and_restores(tmp_path: Path) -> None:
    driver = FakeDriver()
    vm = await launch(driver, make_spec(tmp_path), tmp_path / "vm")
    devices = tmp_path / "devices"

    with pytest.raises(Conflict):
        await vm.save_device_state(devices)
    assert not devices.exists()
    await vm.pause()
    await vm.save_device_state(devices)
    assert await vm.status() == "paused"

    target = await launch(driver, make_spec(tmp_path), tmp_path / "target", incoming=True)
    await target.restore(devices)
    assert await target.status() == "running"


async def test_restore_needs_an_incoming_vm_and_its_state_file(tmp_path: Path) -> None:
    driver = FakeDriver()
    source = await launch(driver, make_spec(tmp_path), tmp_path / "source")
    await source.capture(tmp_path / "state")
    with pytest.raises(Conflict):
        await source.restore(tmp_path / "state")

    waiting = await launch(driver, make_spec(tmp_path), tmp_path / "waiting", incoming=True)
    with pytest.raises(NotFound):
        await waiting.restore(tmp_path / "missing-state")
    assert await waiting.status() == "inmigrate"  # still usable: nothing reached QEMU

    phases = await waiting.restore(tmp_path / "state")
    assert set(phases) == {"migrate_incoming", "cont"}
    assert await waiting.status() == "running"
    with pytest.raises(Conflict):
        await waiting.restore(tmp_path / "state")  # QEMU takes one incoming migration

    stopped = await launch(driver, make_spec(tmp_path), tmp_path / "stopped", incoming=True)
    assert set(await stopped.restore(tmp_path / "state", run=False)) == {"migrate_incoming"}
    assert await stopped.status() == "paused"


async def test_restore_of_a_corrupt_state_raises_internal_and_the_vm_is_gone(
    tmp_path: Path
) -> None:
    (tmp_path / "state").write_bytes(b"not a migration stream")
    vm = await FakeDriver().launch(make_spec(tmp_path), tmp_path / "vm", incoming=True)

    with pytest.raises(VmExited) as failure:
        await vm.restore(tmp_path / "state")

    assert "exited" in failure.value.message
    assert vm.exit_code == 1 and vm.stopping
    with pytest.raises(QmpConnectionLost):
        await vm.status()
    with pytest.raises(Conflict):
        await vm.restore(tmp_path / "state")


async def test_an_injected_failure_raises_before_any_effect_until_removed(tmp_path: Path) -> None:
    (tmp_path / "state").write_bytes(STATE_MARKER)
    boom = Internal("QMP migrate-incoming failed: injected")
    driver = FakeDriver(vm_fail_on={"restore": boom})
    vm = await driver.launch(make_spec(tmp_path), tmp_path / "vm", incoming=True)

    with pytest.raises(Internal) as failure:
        await vm.restore(tmp_path / "state")
    assert failure.value is boom
    assert await vm.status() == "inmigrate"
    assert vm.methods_called == ["restore", "status"]

    del vm.fail_on["restore"]
    await vm.restore(tmp_path / "state")
    assert await vm.status() == "running"
    assert driver.vm_fail_on == {"restore": boom}  # each VM got its own copy


async def test_a_failed_launch_leaves_an_empty_workdir_and_no_vm(tmp_path: Path) -> None:
    driver = FakeDriver()
    driver.launch_failures.append(Internal("QEMU failed to start: injected"))

    with pytest.raises(Internal, match="injected"):
        await driver.launch(make_spec(tmp_path), tmp_path / "vm", incoming=False)
    assert list((tmp_path / "vm").iterdir()) == []
    assert driver.launched == []

    missing = DiskSpec("root", tmp_path / "no-such-disk.qcow2", "qcow2", readonly=False)
    with pytest.raises(VmStartError, match="no-such-disk"):
        await driver.launch(make_spec(tmp_path, missing), tmp_path / "vm", incoming=False)

    vm = await driver.launch(make_spec(tmp_path), tmp_path / "vm", incoming=False)
    assert driver.launched == [vm]


async def test_shutdown_ends_the_vm_idempotently_also_concurrently(tmp_path: Path) -> None:
    vm = await FakeDriver().launch(make_spec(tmp_path), tmp_path / "vm", incoming=False)

    await asyncio.gather(vm.shutdown(), vm.shutdown())
    await vm.shutdown()

    assert vm.stopping and vm.exit_code == 0
    assert [path for path in vm.files.all() if path.exists()] == []
    with pytest.raises(QmpConnectionLost):
        await vm.pause()
    assert vm.methods_called == ["shutdown", "shutdown", "shutdown", "pause"]


async def test_a_released_vm_is_not_stopped_but_answers_no_more(tmp_path: Path) -> None:
    vm = await FakeDriver().launch(make_spec(tmp_path), tmp_path / "vm", incoming=False)

    await vm.release()

    assert vm.released and not vm.stopping
    with pytest.raises(QmpConnectionLost):
        await vm.status()
    with pytest.raises(CaptureFailed, match="cannot be frozen"):
        await vm.freeze()


async def test_disk_chains_follow_overlay_switches_and_streams(tmp_path: Path) -> None:
    base = qemu_img_create(tmp_path / "base.raw", "raw")
    first = qemu_img_create(tmp_path / "first.qcow2", "qcow2", backing=(base, "raw"))
    spec = make_spec(tmp_path, DiskSpec("root", first, "qcow2", readonly=False))
    vm = await FakeDriver().launch(spec, tmp_path / "vm", incoming=False)

    assert await vm.disk_chain("root") == DiskChain("node-root", first, [base])
    with pytest.raises(NotFound):
        await vm.disk_chain("data")

    second = tmp_path / "second.qcow2"
    with pytest.raises(QmpCommandFailed, match="Could not open"):
        await vm.switch_disk_to_overlay("node-root", "overlay1", second)
    qemu_img_create(second, "qcow2", backing=(first, "qcow2"))
    with pytest.raises(QmpCommandFailed, match="Cannot find"):
        await vm.switch_disk_to_overlay("node-other", "overlay1", second)
    assert await vm.disk_chain("root") == DiskChain("node-root", first, [base])

    await vm.pause()
    await vm.switch_disk_to_overlay("node-root", "overlay1", second)
    await vm.resume()
    await vm.close_writable_fds()
    assert vm.writable_fds_closed
    assert await vm.disk_chain("root") == DiskChain("overlay1", second, [first, base])

    with pytest.raises(QmpCommandFailed, match="backing chain"):
        await vm.stream_disk("overlay1", tmp_path / "elsewhere.raw")
    await vm.stream_disk("overlay1", base)
    assert await vm.disk_chain("root") == DiskChain("overlay1", second, [base])
    assert vm.calls[-2:] == [
        Call("stream_disk", {"top_node": "overlay1", "base": base, "time_limit": 600.0}),
        Call("disk_chain", {"disk_id": "root"}),
    ]


async def test_a_disk_passed_by_descriptor_is_named_by_its_fd_set(tmp_path: Path) -> None:
    disk = qemu_img_create(tmp_path / "disk.raw", "raw")
    spec = make_spec(tmp_path, DiskSpec("root", disk, "raw", readonly=False, by_fd=True))
    vm = await FakeDriver().launch(spec, tmp_path / "vm", incoming=True)

    assert await vm.disk_chain("root") == DiskChain("node-root", Path("/dev/fdset/1"), [])
