"""build_argv: the exact QEMU command line, per accelerator and option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aenv_nodeagent.vmm import (
    Accelerator,
    AcceleratorChoice,
    DiskSpec,
    NetSpec,
    VmFiles,
    VmSpec,
    build_argv,
)
from aenv_nodeagent.vmm.argv import SOCKET_DIR

TCG = AcceleratorChoice(Accelerator.TCG, "test", guest_tsc_khz=2445406)
FILES = VmFiles.in_dir(Path("/run/aenv/vm1"))


def make_spec(**changes: object) -> VmSpec:
    spec = VmSpec(
        vcpus=2, memory_mib=256, kernel=Path("/k/vmlinux"), initrd=Path("/k/initrd"),
        cmdline="console=ttyS0 quiet",
        disks=(DiskSpec("root", Path("/o/root.qcow2"), "qcow2", readonly=False),
               DiskSpec("tools", Path("/a/tools.raw"), "raw", readonly=True)),
        net=NetSpec(), mem_path=Path("/dev/shm/vm1.mem"), mem_shared=True, accel=TCG,
    )
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_full_tcg_argv() -> None:
    argv = build_argv(make_spec(), FILES, incoming=False, console_log=Path("/l/console.log"))

    assert argv == [
        "qemu-system-x86_64",
        "-M", "microvm,acpi=on,pit=off,memory-backend=mem",
        "-accel", "tcg,tb-size=64",
        "-cpu", "max",
        "-smp", "2",
        "-nographic", "-nodefaults", "-no-user-config", "-no-reboot",
        "-m", "256M",
        "-object", "memory-backend-file,id=mem,size=256M,mem-path=/dev/shm/vm1.mem,share=on",
        "-kernel", "/k/vmlinux",
        "-initrd", "/k/initrd",
        "-append", "console=ttyS0 quiet tsc_early_khz=2445406",
        "-chardev", "socket,id=qmp,path=/run/aenv/vm1/qmp.sock,server=on,wait=off",
        "-mon", "chardev=qmp,mode=control",
        "-pidfile", "/run/aenv/vm1/qemu.pid",
        "-chardev", "file,path=/l/console.log,append=on,id=serial0",
        "-serial", "chardev:serial0",
        "-device", "virtio-rng-device,id=rng0",
        "-device", "virtio-balloon-device,id=balloon0,free-page-reporting=on",
        "-netdev", "tap,id=net0,ifname=tap0,script=no,downscript=no",
        "-device", "virtio-net-device,id=nic0,netdev=net0,mac=02:fc:00:00:00:15",
        "-blockdev", "driver=qcow2,node-name=node-root,read-only=off,"
                     "file.driver=file,file.filename=/o/root.qcow2,discard=unmap",
        "-device", "virtio-blk-device,id=root,drive=node-root",
        "-blockdev", "driver=raw,node-name=node-tools,read-only=on,"
                     "file.driver=file,file.filename=/a/tools.raw",
        "-device", "virtio-blk-device,id=tools,drive=node-tools",
    ]


def test_kvm_uses_host_cpu_and_no_tsc_hint() -> None:
    kvm = AcceleratorChoice(Accelerator.KVM, "test")
    argv = build_argv(make_spec(accel=kvm), FILES, incoming=False, console_log=None)
    assert option(argv, "-accel") == ["kvm"]
    assert option(argv, "-cpu") == ["host"]
    assert option(argv, "-append") == ["console=ttyS0 quiet"]
    assert option(argv, "-M") == ["microvm,acpi=on,memory-backend=mem"]


def test_tcg_keeps_the_pit_when_the_guest_calibrates_its_tsc_on_it() -> None:
    unknown_rate = AcceleratorChoice(Accelerator.TCG, "test")
    argv = build_argv(make_spec(accel=unknown_rate), FILES, incoming=False, console_log=None)
    assert option(argv, "-M") == ["microvm,acpi=on,memory-backend=mem"]
    assert option(argv, "-append") == ["console=ttyS0 quiet"]
    given = make_spec(accel=unknown_rate, cmdline="console=ttyS0 tsc_early_khz=1000")
    argv = build_argv(given, FILES, incoming=False, console_log=None)
    assert option(argv, "-M") == ["microvm,acpi=on,pit=off,memory-backend=mem"]


def test_pvm_masks_arch_capabilities_and_boots_pvm_kernel() -> None:
    pvm = AcceleratorChoice(Accelerator.PVM, "test", kernel_override=Path("/k/pvm"))
    argv = build_argv(make_spec(accel=pvm), FILES, incoming=False, console_log=None)
    assert option(argv, "-accel") == ["kvm"]
    assert option(argv, "-cpu") == ["host,-arch-capabilities"]
    assert option(argv, "-kernel") == ["/k/pvm"]


def test_incoming_waits_for_deferred_migration_paused() -> None:
    argv = build_argv(make_spec(mem_shared=False), FILES, incoming=True, console_log=None)
    assert option(argv, "-incoming") == ["defer"]
    assert "-S" in argv
    assert option(argv, "-object")[0].endswith(",share=off")


def test_device_set_does_not_depend_on_paths_or_console() -> None:
    # A restore target differs in files only; the devices and their ids must be identical.
    def devices(argv: list[str]) -> list[str]:
        return option(argv, "-device")

    source = build_argv(make_spec(), FILES, incoming=False, console_log=Path("/l/a.log"))
    child_disks = (DiskSpec("root", Path("/o/child.qcow2"), "qcow2", readonly=False),
                   DiskSpec("tools", Path("/a/tools.raw"), "raw", readonly=True))
    child = build_argv(make_spec(disks=child_disks, mem_shared=False,
                                 mem_path=Path("/dev/shm/other.mem")),
                       VmFiles.in_dir(Path("/run/aenv/vm2")), incoming=True, console_log=None)
    assert devices(source) == devices(child)
    assert option(child, "-chardev")[1] == "null,id=serial0"


def test_commas_in_paths_are_escaped() -> None:
    disk = DiskSpec("root", Path("/o/a,b.qcow2"), "qcow2", readonly=False)
    spec = make_spec(disks=(disk,), mem_path=Path("/m/x,y"))
    argv = build_argv(spec, VmFiles.in_dir(Path("/r,s")), incoming=False,
                      console_log=Path("/l/c,d.log"))
    assert "file.filename=/o/a,,b.qcow2" in option(argv, "-blockdev")[0]
    assert "mem-path=/m/x,,y" in option(argv, "-object")[0]
    assert option(argv, "-chardev")[0].startswith("socket,id=qmp,path=/r,,s/qmp.sock,")
    assert option(argv, "-chardev")[1] == "file,path=/l/c,,d.log,append=on,id=serial0"


def test_existing_tsc_hint_is_kept_and_no_net_means_no_nic() -> None:
    spec = make_spec(cmdline="console=ttyS0 tsc_early_khz=1000", net=None, disks=())
    argv = build_argv(spec, FILES, incoming=False, console_log=None)
    assert option(argv, "-append") == ["console=ttyS0 tsc_early_khz=1000"]
    assert "-netdev" not in argv
    assert option(argv, "-device") == [
        "virtio-rng-device,id=rng0", "virtio-balloon-device,id=balloon0,free-page-reporting=on",
    ]


def test_free_page_reporting_can_be_turned_off_for_fork_templates() -> None:
    argv = build_argv(make_spec(free_page_reporting=False), FILES, incoming=False,
                      console_log=None)
    assert "virtio-balloon-device,id=balloon0,free-page-reporting=off" in option(argv, "-device")


def test_deep_workdir_gets_a_short_socket_path() -> None:
    deep = Path("/tmp/" + "d" * 120)
    files = VmFiles.in_dir(deep)
    assert len(str(files.qmp_socket)) <= 107
    assert files.qmp_socket != VmFiles.in_dir(Path("/tmp/" + "e" * 120)).qmp_socket
    assert files.pidfile.parent == deep
    assert files.qmp_socket.parent.parent == SOCKET_DIR  # a directory of its own


def test_disk_passed_by_descriptor_goes_through_an_fd_set() -> None:
    root = DiskSpec("root", Path("/o/root.qcow2"), "qcow2", readonly=False, by_fd=True)
    spec = make_spec(disks=(root, DiskSpec("tools", Path("/a/t.raw"), "raw", readonly=True)))
    argv = build_argv(spec, FILES, incoming=True, console_log=None, disk_fds={"root": [7, 8]})
    assert option(argv, "-add-fd") == ["fd=7,set=1,opaque=root", "fd=8,set=1,opaque=root"]
    blockdevs = option(argv, "-blockdev")
    assert "file.filename=/dev/fdset/1" in blockdevs[0] and "/o/root.qcow2" not in blockdevs[0]
    assert "file.filename=/a/t.raw" in blockdevs[1]
    with pytest.raises(ValueError, match="descriptor"):
        build_argv(spec, FILES, incoming=True, console_log=None)
