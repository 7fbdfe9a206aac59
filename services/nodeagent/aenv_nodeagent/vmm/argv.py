"""Pure construction of the QEMU command line for a microVM (no I/O, unit-tested)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.accel import Accelerator
from aenv_nodeagent.vmm.spec import DiskSpec, NetSpec, VmSpec

QEMU_BINARY = "qemu-system-x86_64"

# Stable device ids: device state restores only into a QEMU with the same device set, in the same
# order, under the same ids; file paths (overlays, memory file, console) may differ.
MEMORY_BACKEND_ID = "mem"
RNG_ID = "rng0"
BALLOON_ID = "balloon0"
NETDEV_ID = "net0"
NIC_ID = "nic0"
QMP_CHARDEV_ID = "qmp"
SERIAL_CHARDEV_ID = "serial0"

_CPU_MODEL = {
    Accelerator.KVM: "host",
    # PVM aborts on MSR 0x10a (IA32_ARCH_CAPABILITIES) with a plain `-cpu host`.
    Accelerator.PVM: "host,-arch-capabilities",
    Accelerator.TCG: "max",
}


UNIX_PATH_MAX = 107
SOCKET_DIR = Path("/run/aenv/qmp")


@dataclass(frozen=True)
class VmFiles:
    """The per-VM files QEMU creates in its work directory."""

    qmp_socket: Path
    pidfile: Path
    stderr_log: Path

    @classmethod
    def in_dir(cls, workdir: Path) -> VmFiles:
        """Files in `workdir`, but the QMP socket where its path fits a unix socket address
        (107 bytes): a deep work directory gets one in a directory of its own under SOCKET_DIR,
        named by its hash (its own: a jailed QEMU may create its socket there and nowhere
        else)."""
        socket = workdir / "qmp.sock"
        if len(str(socket)) > UNIX_PATH_MAX:
            digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:24]
            socket = SOCKET_DIR / digest / "qmp.sock"
        return cls(socket, workdir / "qemu.pid", workdir / "qemu.stderr")

    def all(self) -> tuple[Path, ...]:
        return (self.qmp_socket, self.pidfile, self.stderr_log)


def opt_value(value: str | Path) -> str:
    """Escape a value for QEMU's key=value option syntax, where ',' must be doubled."""
    return str(value).replace(",", ",,")


def build_argv(
    spec: VmSpec,
    files: VmFiles,
    *,
    incoming: bool,
    console_log: Path | None,
    qemu_binary: str = QEMU_BINARY,
    disk_fds: Mapping[str, Sequence[int]] | None = None,
) -> list[str]:
    """The full QEMU argv for `spec`: machine, memory, boot, control, console, then devices.
    `disk_fds`: the inherited descriptors of each `by_fd` disk, by disk id."""
    fds = disk_fds or {}
    return [
        qemu_binary,
        *_machine_args(spec),
        *_memory_args(spec),
        *_boot_args(spec),
        *_control_args(files, incoming),
        *_console_args(console_log),
        *_entropy_and_balloon_args(spec.free_page_reporting),
        *_net_args(spec.net),
        *(arg for index, disk in enumerate(spec.disks)
          for arg in _disk_args(disk, fds.get(disk.id), fd_set=index + 1)),
    ]


def _machine_args(spec: VmSpec) -> list[str]:
    # acpi=on: the guest kernel finds virtio-mmio devices only through ACPI. Keep pic/rtc on:
    # turning them off hangs TCG guests.
    machine = f"microvm,acpi=on{_pit(spec)},memory-backend={MEMORY_BACKEND_ID}"
    accel = spec.accel.accel
    accel_arg = f"tcg,tb-size={spec.tcg_tb_mib}" if accel is Accelerator.TCG else "kvm"
    return [
        "-M", machine,
        "-accel", accel_arg,
        "-cpu", _CPU_MODEL[accel],
        "-smp", str(spec.vcpus),
        "-nographic", "-nodefaults", "-no-user-config", "-no-reboot",
    ]


def _pit(spec: VmSpec) -> str:
    """No PIT for a TCG guest given its TSC rate. Its kernel calibrates nothing on the PIT then
    (the TSC's rate is given, the local APIC timer's is measured on the TSC) and ticks on the
    local APIC, but leaves the PIT counting as reset, whose every half period (27 ms) QEMU's
    main loop wakes to emulate: the larger part of an idle TCG guest's cost once its own tick
    stops. Without the rate the boot calibrates the TSC on the PIT: it stays."""
    given_rate = "tsc_early_khz=" in guest_cmdline(spec)
    return ",pit=off" if spec.accel.accel is Accelerator.TCG and given_rate else ""


def _memory_args(spec: VmSpec) -> list[str]:
    share = "on" if spec.mem_shared else "off"
    backend = (
        f"memory-backend-file,id={MEMORY_BACKEND_ID},size={spec.memory_mib}M,"
        f"mem-path={opt_value(spec.mem_path)},share={share}"
    )
    return ["-m", f"{spec.memory_mib}M", "-object", backend]


def _boot_args(spec: VmSpec) -> list[str]:
    return [
        "-kernel", str(spec.boot_kernel),
        "-initrd", str(spec.initrd),
        "-append", guest_cmdline(spec),
    ]


def guest_cmdline(spec: VmSpec) -> str:
    """The spec's cmdline plus what the accelerator needs: under TCG a fixed TSC rate, because
    the guest's PIT calibration fails on a loaded host and the boot then hangs."""
    tsc_khz = spec.accel.guest_tsc_khz
    if tsc_khz is None or "tsc_early_khz=" in spec.cmdline:
        return spec.cmdline
    return f"{spec.cmdline} tsc_early_khz={tsc_khz}".strip()


def _control_args(files: VmFiles, incoming: bool) -> list[str]:
    args = [
        "-chardev",
        f"socket,id={QMP_CHARDEV_ID},path={opt_value(files.qmp_socket)},server=on,wait=off",
        "-mon", f"chardev={QMP_CHARDEV_ID},mode=control",
        "-pidfile", str(files.pidfile),
    ]
    if incoming:
        # -S: stay paused after the incoming migration, so the caller decides when to `cont`.
        args += ["-incoming", "defer", "-S"]
    return args


def _console_args(console_log: Path | None) -> list[str]:
    # The serial device always exists (null backend without a log) so the device set, and thus
    # the saved device state, does not depend on whether a console log was asked for. Appended
    # to: the node agent cuts the file once read (sandbox/logs.py), and QEMU must then write at
    # its new end, or a guest flooding its console would fill the host's disk.
    backend = f"file,path={opt_value(console_log)},append=on" if console_log else "null"
    return [
        "-chardev", f"{backend},id={SERIAL_CHARDEV_ID}",
        "-serial", f"chardev:{SERIAL_CHARDEV_ID}",
    ]


def _entropy_and_balloon_args(free_page_reporting: bool) -> list[str]:
    # free-page-reporting returns memory the guest frees to the host (holes in the RAM file).
    reporting = "on" if free_page_reporting else "off"
    return [
        "-device", f"virtio-rng-device,id={RNG_ID}",
        "-device", f"virtio-balloon-device,id={BALLOON_ID},free-page-reporting={reporting}",
    ]


def _net_args(net: NetSpec | None) -> list[str]:
    if net is None:
        return []
    return [
        "-netdev", f"tap,id={NETDEV_ID},ifname={net.tap},script=no,downscript=no",
        "-device", f"virtio-net-device,id={NIC_ID},netdev={NETDEV_ID},mac={net.mac}",
    ]


def block_node_name(disk: DiskSpec) -> str:
    return f"node-{disk.id}"


def _disk_args(disk: DiskSpec, fds: Sequence[int] | None, *, fd_set: int) -> list[str]:
    if disk.by_fd and not fds:
        raise ValueError(f"disk {disk.id} is passed by descriptor but none was given")
    read_only = "on" if disk.readonly else "off"
    filename = f"/dev/fdset/{fd_set}" if disk.by_fd else opt_value(disk.path)
    blockdev = (
        f"driver={disk.format},node-name={block_node_name(disk)},read-only={read_only},"
        f"file.driver=file,file.filename={filename}"
    )
    if not disk.readonly:
        blockdev += ",discard=unmap"
    add_fd = [arg for fd in fds or () for arg in
              ("-add-fd", f"fd={fd},set={fd_set},opaque={disk.id}")]
    return [
        *add_fd,
        "-blockdev", blockdev,
        "-device", f"virtio-blk-device,id={disk.id},drive={block_node_name(disk)}",
    ]
