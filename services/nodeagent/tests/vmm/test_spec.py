"""VmSpec/DiskSpec/NetSpec validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.vmm import Accelerator, AcceleratorChoice, DiskSpec, NetSpec, VmSpec

TCG = AcceleratorChoice(Accelerator.TCG, "test")
PVM = AcceleratorChoice(Accelerator.PVM, "test", kernel_override=Path("/k/pvm-vmlinux"))


def make_spec(**changes: object) -> VmSpec:
    spec = VmSpec(vcpus=1, memory_mib=256, kernel=Path("/k/vmlinux"), initrd=Path("/k/initrd"),
                  cmdline="console=ttyS0", disks=(), net=None, mem_path=Path("/dev/shm/m"),
                  mem_shared=True, accel=TCG)
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_id", ["", "1root", "root disk", "a,b", "x" * 27])
def test_disk_id_must_be_a_short_qemu_id(bad_id: str) -> None:
    with pytest.raises(InvalidArgument):
        DiskSpec(bad_id, Path("/d"), "qcow2", readonly=False)


def test_disk_format_is_qcow2_or_raw() -> None:
    DiskSpec("root", Path("/d"), "raw", readonly=True)
    with pytest.raises(InvalidArgument):
        DiskSpec("root", Path("/d"), "vmdk", readonly=True)


@pytest.mark.parametrize("net", [{"tap": ""}, {"tap": "a-very-long-tapname"}, {"mac": "02:fc:00"}])
def test_net_spec_validates_tap_and_mac(net: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument):
        NetSpec(**net)


@pytest.mark.parametrize("changes", [{"vcpus": 0}, {"memory_mib": 8}, {"tcg_tb_mib": 0}])
def test_vm_spec_rejects_nonsense_sizes(changes: dict[str, int]) -> None:
    with pytest.raises(InvalidArgument):
        make_spec(**changes)


def test_vm_spec_rejects_duplicate_disk_ids() -> None:
    disk = DiskSpec("root", Path("/d"), "qcow2", readonly=False)
    with pytest.raises(InvalidArgument):
        make_spec(disks=(disk, disk))


def test_boot_kernel_is_the_pvm_kernel_under_pvm() -> None:
    assert make_spec().boot_kernel == Path("/k/vmlinux")
    assert make_spec(accel=PVM).boot_kernel == Path("/k/pvm-vmlinux")
