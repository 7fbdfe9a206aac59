"""Real QEMU disk chains: overlay switches, block-stream, fd-set cleanup, and adopting a QEMU."""

from __future__ import annotations

from pathlib import Path

import pytest

from aenv_common.errors import NotFound
from aenv_nodeagent.vmm import DiskSpec, QemuVm, VmSpec
from aenv_nodeagent.vmm.errors import QmpCommandFailed
from aenv_nodeagent.vmm.qemu_disks import DiskChain

from .conftest import Launcher, with_disk
from .guest import qemu_img_create

pytestmark = pytest.mark.vm


async def test_overlay_switches_and_a_stream_reshape_the_disk_chain(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    base = qemu_img_create(scratch / "base.raw", "raw")
    first = qemu_img_create(scratch / "first.qcow2", "qcow2", backing=(base, "raw"))
    vm = await launch(with_disk(ticker_spec, DiskSpec("root", first, "qcow2", readonly=False)),
                      "vm")
    assert await vm.disk_chain("root") == DiskChain("node-root", first, [base])
    with pytest.raises(NotFound):
        await vm.disk_chain("data")

    second = qemu_img_create(scratch / "second.qcow2", "qcow2", backing=(first, "qcow2"))
    await vm.pause()
    await vm.switch_disk_to_overlay("node-root", "overlay1", second)
    with pytest.raises(QmpCommandFailed):
        await vm.switch_disk_to_overlay("overlay1", "overlay2", scratch / "missing.qcow2")
    third = qemu_img_create(scratch / "third.qcow2", "qcow2", backing=(second, "qcow2"))
    with pytest.raises(QmpCommandFailed):
        await vm.switch_disk_to_overlay("no-such-node", "overlay2", third)
    # The failed snapshot deleted the node it had added: its name is free again.
    await vm.switch_disk_to_overlay("overlay1", "overlay2", third)
    await vm.resume()
    assert await vm.disk_chain("root") == DiskChain("overlay2", third, [second, first, base])

    await vm.stream_disk("overlay2", base)

    assert await vm.disk_chain("root") == DiskChain("overlay2", third, [base])
    assert await vm.status() == "running"


async def test_writable_descriptors_leave_the_fd_set_once_the_disk_is_frozen(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    base = qemu_img_create(scratch / "base.raw", "raw")
    disk = qemu_img_create(scratch / "disk.qcow2", "qcow2", backing=(base, "raw"))
    vm = await launch(with_disk(ticker_spec, DiskSpec("root", disk, "qcow2", readonly=False,
                                                      by_fd=True)), "vm")
    assert (await vm.disk_chain("root")).top_file == Path("/dev/fdset/1")
    assert sorted(_fd_set_modes(vm, await vm.execute("query-fdsets"))) == ["r", "rw"]

    overlay = qemu_img_create(scratch / "overlay.qcow2", "qcow2", backing=(disk, "qcow2"))
    await vm.pause()
    await vm.switch_disk_to_overlay("node-root", "overlay1", overlay)
    await vm.resume()
    await vm.close_writable_fds()

    assert _fd_set_modes(vm, await vm.execute("query-fdsets")) == ["r"]
    assert await vm.disk_chain("root") == DiskChain("overlay1", overlay, [disk, base])


async def test_a_released_qemu_is_adopted_from_its_workdir(
    launch: Launcher, ticker_spec: VmSpec, scratch: Path
) -> None:
    with pytest.raises(NotFound):
        await QemuVm.attach(scratch / "nothing-here")
    vm = await launch(ticker_spec, "vm")
    await vm.release()

    adopted = await QemuVm.attach(scratch / "vm")
    try:
        assert adopted.pid == vm.pid
        assert adopted.files.qmp_socket == vm.files.qmp_socket
        assert await adopted.status() == "running"
    finally:
        await adopted.shutdown()
    assert adopted.exit_code is not None


def _fd_set_modes(vm: QemuVm, reply: object) -> list[str]:
    """The access mode of each descriptor in QEMU's fd sets, from /proc."""
    assert isinstance(reply, list)
    modes = []
    for fdset in reply:
        for entry in fdset["fds"]:
            info = Path(f"/proc/{vm.pid}/fdinfo/{entry['fd']}").read_text()
            flags = next(int(line.split()[1], 8) for line in info.splitlines()
                         if line.startswith("flags:"))
            modes.append("r" if flags & 0o3 == 0 else "rw")
    return modes
