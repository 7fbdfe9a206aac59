"""The VMM seam: the `Vm` and `VmmDriver` protocols the node agent needs, and QEMU's driver."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.confinement import VmCgroup
from aenv_nodeagent.vmm.confined import VmJail
from aenv_nodeagent.vmm.frozen import FrozenCopy
from aenv_nodeagent.vmm.qemu import QemuVm
from aenv_nodeagent.vmm.qemu_disks import DiskChain
from aenv_nodeagent.vmm.spec import VmSpec


class Vm(Protocol):
    """One running VMM process, as the node agent uses it: exactly the QemuVm members used
    outside vmm/. Phase-timed methods return {phase: milliseconds}; failures are AenvErrors."""

    @property
    def pid(self) -> int: ...

    @property
    def stopping(self) -> bool:
        """Whether the VMM has exited or is being shut down."""
        ...

    @property
    def logs_writes(self) -> bool:
        """Whether the guest's RAM writes are logged since the VMM mapped the RAM file."""
        ...

    @property
    def freezes(self) -> bool:
        """Whether `freeze` can make frozen copies of this VM's memory."""
        ...

    @property
    def cgroup(self) -> VmCgroup | None:
        """The VMM's own cgroup (confinement/), when it runs in one."""
        ...

    async def exit_status(self, time_limit: float = 1.0) -> int | None:
        """The status of a VMM that exited (negative: the signal that ended it); None when it
        cannot be known or the VMM was not reaped in time."""
        ...

    async def disk_full(self) -> str:
        """Returns (the disk's name) once the VMM stopped the guest because a disk write found
        no room on the host."""
        ...

    async def status(self) -> str:
        """QEMU's run state: running, paused, inmigrate, postmigrate..."""
        ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def capture(
        self, state_path: Path, time_limit: float = 30.0, *, ignore_shared: bool = True
    ) -> dict[str, float]:
        """Stop the VM and save its device state to `state_path`; it stays stopped."""
        ...

    async def save_device_state(self, state_path: Path) -> None:
        """Save every device's state, no RAM, to `state_path`; the VM must be stopped."""
        ...

    async def restore(
        self, state_path: Path, time_limit: float = 30.0, *, run: bool = True,
        ignore_shared: bool = True,
    ) -> dict[str, float]:
        """Load device state into this VM launched incoming, then run it unless `run=False`.
        A missing state file raises NotFound; a corrupt one Internal."""
        ...

    async def repoint(self, memory: Path, top_node: str, top_layer: Path) -> None:
        """Before its restore, make a VM launched on a template's files the target of a
        snapshot of it: `memory` over its RAM, `top_layer`'s chain under `top_node`. A VM that
        could not be raises RemapFailed and must never run."""
        ...

    async def disk_chain(self, disk_id: str) -> DiskChain:
        """The layers under disk `disk_id`: top node and file, then backing files, nearest
        first."""
        ...

    async def switch_disk_to_overlay(self, top_node: str, new_node: str, overlay: Path) -> None:
        """Make `overlay` the disk's new top layer (node `new_node`); the old one is frozen."""
        ...

    async def close_writable_fds(self) -> None:
        """Drop the writable descriptors of disks passed by fd, once they are frozen layers."""
        ...

    async def stream_disk(self, top_node: str, base: Path, time_limit: float = 600.0) -> None:
        """Merge the layers between `top_node` and `base` into it; the VM keeps running."""
        ...

    async def freeze(self) -> FrozenCopy:
        """A frozen copy of the memory of this stopped VM (vmm/frozen.py)."""
        ...

    async def release(self) -> None:
        """Let go of the VMM without stopping it."""
        ...

    async def shutdown(self, grace: float = 2.0) -> None:
        """Stop the VMM and remove its files. Idempotent, also when called concurrently."""
        ...


class VmmDriver(Protocol):
    """Launches VMs: how the node agent starts one, whatever the VMM."""

    name: str

    async def launch(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
    ) -> Vm:
        """Start a VM of `spec` in `workdir` (created if missing); `incoming` for one to
        `restore` into. `argv_prefix` must exec the VMM (as `ip netns exec NS` does)."""
        ...


class QemuDriver:
    """VmmDriver backed by QEMU `-M microvm`; every QEMU confined by `jail` (rlimits only by
    default; the node passes its cgroups)."""

    name = "qemu"

    def __init__(self, jail: VmJail | None = None, start_timeout_s: float = 10.0) -> None:
        self.jail = jail or VmJail()
        self._start_timeout_s = start_timeout_s

    async def launch(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
    ) -> QemuVm:
        return await QemuVm.launch(
            spec, workdir, incoming=incoming, argv_prefix=argv_prefix, console_log=console_log,
            start_timeout=self._start_timeout_s, jail=self.jail,
        )


# mypy proves here that QEMU implements the seam.
_QEMU_VM: type[Vm] = QemuVm
_QEMU_DRIVER: type[VmmDriver] = QemuDriver
