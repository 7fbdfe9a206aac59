"""What a microVM is made of: CPUs, RAM file, kernel, disks, NIC. Validated at construction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.vmm.accel import AcceleratorChoice

# QEMU ids: a letter, then letters, digits, "-", ".", "_"; short enough that "node-<id>" fits
# the 31 characters of a block node name.
_QEMU_ID = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,25}")
_MAC = re.compile(r"(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}")
_IFNAME_MAX = 15
DISK_FORMATS = frozenset({"qcow2", "raw"})


@dataclass(frozen=True)
class DiskSpec:
    id: str
    path: Path
    format: str
    readonly: bool
    # Hand QEMU an open descriptor (an fd set) instead of the path: QEMU reopens disks by name
    # when it activates them after an incoming migration, and a pre-started VM's disk file is
    # renamed into its sandbox's directory before that.
    by_fd: bool = False

    def __post_init__(self) -> None:
        if not _QEMU_ID.fullmatch(self.id):
            raise InvalidArgument(f"disk id {self.id!r} is not a valid QEMU id")
        if self.format not in DISK_FORMATS:
            raise InvalidArgument(
                f"disk format {self.format!r} is not one of {sorted(DISK_FORMATS)}"
            )


@dataclass(frozen=True)
class NetSpec:
    tap: str = "tap0"
    # Identical in every sandbox: restored and forked guests keep their cached ARP entries.
    mac: str = "02:fc:00:00:00:15"

    def __post_init__(self) -> None:
        if not self.tap or len(self.tap) > _IFNAME_MAX or "," in self.tap:
            raise InvalidArgument(f"tap name {self.tap!r} is not a valid interface name")
        if not _MAC.fullmatch(self.mac):
            raise InvalidArgument(f"mac {self.mac!r} is not a MAC address")


@dataclass(frozen=True)
class VmSpec:
    vcpus: int
    memory_mib: int
    kernel: Path
    initrd: Path
    cmdline: str
    disks: tuple[DiskSpec, ...]
    net: NetSpec | None
    mem_path: Path
    # share=on for a VM that owns its memory file; share=off (MAP_PRIVATE, copy-on-write) for one
    # restored or forked from a frozen file, so the file stays untouched.
    mem_shared: bool
    accel: AcceleratorChoice
    tcg_tb_mib: int = 64
    # Balloon free page reporting returns freed guest RAM to the host. It is a virtio feature, so
    # a restore target must use the same value as the VM that was captured. A share=off VM runs
    # under a seccomp filter, without which QEMU 7.2 would punch the reported pages out of the
    # shared file itself (vmm/seccomp.py).
    free_page_reporting: bool = True
    # Preloaded into QEMU (vmm/preload.py): in a share=off VM it logs which RAM pages the guest
    # writes, for captures that copy only those, and forks QEMU for frozen copies; in any jailed
    # VM it kills an exec or fork (vmm/execfilter.c).
    preload_library: Path | None = None

    def __post_init__(self) -> None:
        if self.vcpus < 1:
            raise InvalidArgument(f"vcpus must be >= 1, got {self.vcpus}")
        if self.memory_mib < 16:
            raise InvalidArgument(f"memory_mib must be >= 16, got {self.memory_mib}")
        if self.tcg_tb_mib < 1:
            raise InvalidArgument(f"tcg_tb_mib must be >= 1, got {self.tcg_tb_mib}")
        ids = [disk.id for disk in self.disks]
        if len(set(ids)) != len(ids):
            raise InvalidArgument(f"disk ids must be unique, got {ids}")

    @property
    def copy_on_write_preload(self) -> bool:
        """The preload's dirty log and frozen copies serve this VM: it maps its RAM share=off."""
        return self.preload_library is not None and not self.mem_shared

    @property
    def boot_kernel(self) -> Path:
        """The kernel actually booted: PVM replaces the default kernel with its own."""
        return self.accel.kernel_override or self.kernel
