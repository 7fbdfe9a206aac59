"""A fake VM and VMM driver behind the vmm seam (`Vm`, `VmmDriver`): no QEMU, no process.

For fast tests of the node agent's bookkeeping. `FakeVm` follows QemuVm's run states (running,
paused, inmigrate, postmigrate) and raises what QemuVm raises where it can tell (a missing
state file: NotFound; a corrupt one: VmExited, and the VM is gone; a restore into a VM not
launched incoming: Conflict). State files it writes hold a marker that its `restore` checks.
Every call is recorded in `calls` and yields to the event loop once, as a QMP round trip does;
`fail_on` makes a method raise (before any effect) for as long as the entry stays.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.confinement import VmCgroup
from aenv_nodeagent.templates.model import ROOT_DISK_ID
from aenv_nodeagent.vmm import Vm, VmFiles, VmmDriver, VmSpec
from aenv_nodeagent.vmm.argv import block_node_name
from aenv_nodeagent.vmm.errors import (
    CaptureFailed,
    QmpCommandFailed,
    QmpConnectionLost,
    RemapFailed,
    VmExited,
    VmmError,
    VmStartError,
    capture_error,
)
from aenv_nodeagent.vmm.frozen import FrozenCopy
from aenv_nodeagent.vmm.qemu_disks import DiskChain
from aenv_nodeagent.vmm.spec import DiskSpec

# Above Linux's PID_MAX_LIMIT (4194304): no process ever has one of these pids.
FAKE_PID_BASE = 1 << 23
STATE_MARKER = b"aenv-fake-vm-state\n"
_QCOW2_MAGIC = b"QFI\xfb"
_QCOW2_BACKING = struct.Struct(">QI")  # backing file name offset and size, at byte 8
_MAX_CHAIN = 64

_pids = itertools.count(FAKE_PID_BASE)


@dataclass(frozen=True)
class Call:
    method: str
    arguments: dict[str, object] = field(default_factory=dict)


class FakeVm:
    """Implements `Vm` in memory. Build it through `FakeDriver.launch` (or directly, alike)."""

    def __init__(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        fail_on: Mapping[str, BaseException] | None = None,
    ) -> None:
        self.spec = spec
        self.workdir = workdir
        self.incoming = incoming
        self.fail_on: dict[str, BaseException] = dict(fail_on or {})
        self.calls: list[Call] = []
        # The disk chains, as QEMU would report them (backing files as qcow2 headers name
        # them); switch_disk_to_overlay and stream_disk change them, and a test may set one.
        self.chains: dict[str, DiskChain] = {
            disk.id: DiskChain(block_node_name(disk), _opened_file(disk, index),
                               _backing_chain(disk.path))
            for index, disk in enumerate(spec.disks)}
        self.logs_writes = spec.copy_on_write_preload
        self.memory = spec.mem_path  # what its RAM maps (repoint changes it)
        self.exit_code: int | None = None
        self.released = False
        self.writable_fds_closed = False
        self.files = VmFiles.in_dir(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self._pid = next(_pids)
        self._status = "inmigrate" if incoming else "running"
        self._awaiting_restore = incoming
        self._shut_down = False
        self._disk_full = asyncio.Event()  # fill_disk(): its host's disk is full
        # Like QEMU's: its pidfile and (empty) stderr log; the QMP socket is not made.
        self.files.pidfile.write_text(f"{self._pid}\n")
        self.files.stderr_log.touch()

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stopping(self) -> bool:
        return self._shut_down or self.exit_code is not None

    @property
    def freezes(self) -> bool:
        return False

    @property
    def methods_called(self) -> list[str]:
        return [call.method for call in self.calls]

    async def status(self) -> str:
        await self._call("status")
        self._qmp("query-status")
        return self._status

    async def pause(self) -> None:
        await self._call("pause")
        self._qmp("stop")
        if self._status == "running":  # QEMU's `stop` changes no other state
            self._status = "paused"

    async def resume(self) -> None:
        await self._call("resume")
        self._qmp("cont")
        if self._status != "inmigrate":  # where QEMU's `cont` only sets autostart
            self._status = "running"

    async def capture(
        self, state_path: Path, time_limit: float = 30.0, *, ignore_shared: bool = True
    ) -> dict[str, float]:
        await self._call("capture", state_path=state_path, time_limit=time_limit,
                         ignore_shared=ignore_shared)
        self._capture_qmp("stop")
        if self._status == "inmigrate":
            raise CaptureFailed(f"QMP migrate failed: GenericError: QEMU {self.pid} is inmigrate")
        if self._status == "running":
            self._status = "paused"
        if not state_path.parent.is_dir():
            raise NotFound(f"device state path {state_path} does not exist")
        self._write_state(state_path, "capture")
        self._status = "postmigrate"
        return {"stop": 0.0, "migrate": 0.0}

    async def save_device_state(self, state_path: Path) -> None:
        await self._call("save_device_state", state_path=state_path)
        self._capture_qmp("query-status")
        if self._status == "running":
            raise Conflict(f"QEMU {self.pid} must be stopped to save its device state")
        if not state_path.parent.is_dir():
            raise CaptureFailed(f"QMP xen-save-devices-state failed: GenericError: cannot open "
                           f"{state_path}")
        self._write_state(state_path, "devices")

    async def restore(
        self, state_path: Path, time_limit: float = 30.0, *, run: bool = True,
        ignore_shared: bool = True,
    ) -> dict[str, float]:
        await self._call("restore", state_path=state_path, time_limit=time_limit, run=run,
                         ignore_shared=ignore_shared)
        if not self._awaiting_restore:
            raise Conflict(f"QEMU {self.pid} was not launched incoming, or has already restored")
        self._qmp("migrate-set-capabilities")
        if not state_path.exists():
            raise NotFound(f"device state path {state_path} does not exist")
        self._awaiting_restore = False  # QEMU accepts one incoming migration, even a failed one
        if not state_path.read_bytes().startswith(STATE_MARKER):
            self._exit(1)  # QEMU exits when an incoming migration fails
            raise VmExited(f"QEMU {self.pid} exited during migrate-incoming (status 1): "
                           "load of migration failed: Invalid argument")
        if not run:
            self._status = "paused"
            return {"migrate_incoming": 0.0}
        self._status = "running"
        return {"migrate_incoming": 0.0, "cont": 0.0}

    async def repoint(self, memory: Path, top_node: str, top_layer: Path) -> None:
        await self._call("repoint", memory=memory, top_node=top_node, top_layer=top_layer)
        if not self._awaiting_restore:
            raise Conflict(f"QEMU {self.pid} is not waiting for an incoming state")
        if not memory.is_file():
            raise RemapFailed(f"cannot open the memory image {memory}: No such file or directory")
        self.memory = memory
        disk_id, chain = self._disk_of(top_node, "blockdev-reopen")
        layers = [top_layer, *_backing_chain(top_layer)]
        if not chain.backing_files or chain.backing_files[0] not in layers[1:]:
            raise RemapFailed(f"QEMU {self.pid} could not take the disk layers: {top_layer} does "
                              f"not stand on the disk's backing")
        self.chains[disk_id] = DiskChain(top_node, chain.top_file, layers)

    async def disk_chain(self, disk_id: str) -> DiskChain:
        await self._call("disk_chain", disk_id=disk_id)
        self._qmp("query-block")
        if disk_id not in self.chains:
            raise NotFound(f"QEMU {self.pid} has no disk {disk_id!r}")
        return self.chains[disk_id]

    async def switch_disk_to_overlay(self, top_node: str, new_node: str, overlay: Path) -> None:
        await self._call("switch_disk_to_overlay", top_node=top_node, new_node=new_node,
                         overlay=overlay)
        self._qmp("blockdev-add")
        if not overlay.is_file():
            raise QmpCommandFailed(f"QMP blockdev-add failed: GenericError: Could not open "
                                   f"'{overlay}': No such file or directory", "blockdev-add",
                                   "GenericError")
        if any(new_node == chain.top_node for chain in self.chains.values()):
            raise QmpCommandFailed(f"QMP blockdev-add failed: GenericError: Duplicate nodes "
                                   f"with node-name='{new_node}'", "blockdev-add",
                                   "GenericError")
        disk_id, chain = self._disk_of(top_node, "blockdev-snapshot")
        backing = _backing_named_by(overlay) or chain.top_file
        self.chains[disk_id] = DiskChain(new_node, overlay, [backing, *chain.backing_files])

    async def close_writable_fds(self) -> None:
        await self._call("close_writable_fds")
        self._qmp("query-fdsets")
        self.writable_fds_closed = True

    async def stream_disk(self, top_node: str, base: Path, time_limit: float = 600.0) -> None:
        await self._call("stream_disk", top_node=top_node, base=base, time_limit=time_limit)
        self._qmp("block-stream")
        disk_id, chain = self._disk_of(top_node, "block-stream")
        if base not in chain.backing_files:
            raise QmpCommandFailed(f"QMP block-stream failed: GenericError: Can't find "
                                   f"'{base}' in the backing chain", "block-stream",
                                   "GenericError")
        kept = chain.backing_files[chain.backing_files.index(base):]
        self.chains[disk_id] = DiskChain(chain.top_node, chain.top_file, kept)

    async def freeze(self) -> FrozenCopy:
        await self._call("freeze")
        raise CaptureFailed(f"QEMU {self.pid} cannot be frozen: it was not launched to be")

    @property
    def cgroup(self) -> VmCgroup | None:
        return None

    async def exit_status(self, time_limit: float = 1.0) -> int | None:
        return self.exit_code

    async def disk_full(self) -> str:
        await self._disk_full.wait()
        return ROOT_DISK_ID

    def fill_disk(self) -> None:
        """The host's disk under the guest's is full: QEMU stops it, as werror=enospc does."""
        self._status = "io-error"
        self._disk_full.set()

    async def release(self) -> None:
        await self._call("release")
        self.released = True

    async def shutdown(self, grace: float = 2.0) -> None:
        await self._call("shutdown", grace=grace)
        if not self._shut_down:
            self._shut_down = True
            self._exit(0)
            for path in self.files.all():
                path.unlink(missing_ok=True)

    async def _call(self, method: str, **arguments: object) -> None:
        """Record the call, raise its injected failure, yield once."""
        self.calls.append(Call(method, arguments))
        if method in self.fail_on:
            raise self.fail_on[method]
        await asyncio.sleep(0)

    def _qmp(self, command: str) -> None:
        """Fail as QemuVm's QMP commands do once QEMU is gone (or let go of)."""
        if self.exit_code is not None or self.released:
            raise QmpConnectionLost(
                f"QMP {command}: lost QEMU (pid {self.pid}): the session is closed")

    def _capture_qmp(self, command: str) -> None:
        """A QMP command of a capture, failing as QemuVm's captures do."""
        try:
            self._qmp(command)
        except VmmError as err:
            raise capture_error(err) from err

    def _exit(self, code: int) -> None:
        if self.exit_code is None:
            self.exit_code = code
        self._status = "gone"  # never reported: status() raises first

    def _disk_of(self, top_node: str, command: str) -> tuple[str, DiskChain]:
        for disk_id, chain in self.chains.items():
            if chain.top_node == top_node:
                return disk_id, chain
        raise QmpCommandFailed(f"QMP {command} failed: GenericError: Cannot find "
                               f"device='{top_node}' nor node-name='{top_node}'", command,
                               "GenericError")

    def _write_state(self, state_path: Path, kind: str) -> None:
        state_path.write_bytes(STATE_MARKER + json.dumps({"pid": self.pid, "kind": kind}).encode())


class FakeDriver:
    """Implements `VmmDriver` with FakeVms. `launched` lists them; an error queued on
    `launch_failures` fails the next launch (after its workdir is made, as QEMU's would); each
    VM starts with a copy of `vm_fail_on`."""

    name = "fake"

    def __init__(self, *, vm_fail_on: Mapping[str, BaseException] | None = None) -> None:
        self.launched: list[FakeVm] = []
        self.launch_failures: list[BaseException] = []
        self.vm_fail_on: dict[str, BaseException] = dict(vm_fail_on or {})

    async def launch(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
    ) -> FakeVm:
        workdir.mkdir(parents=True, exist_ok=True)
        await asyncio.sleep(0)
        if self.launch_failures:
            raise self.launch_failures.pop(0)
        for disk in spec.disks:
            if not disk.path.exists():
                raise VmStartError(f"cannot open disk {disk.path}: No such file or directory")
        if console_log is not None:
            try:
                console_log.touch()  # QEMU opens its console file at start
            except OSError as err:
                raise VmStartError(
                    f"QEMU failed to start: cannot open {console_log}: {err}") from err
        vm = FakeVm(spec, workdir, incoming=incoming, fail_on=self.vm_fail_on)
        self.launched.append(vm)
        return vm


def _opened_file(disk: DiskSpec, index: int) -> Path:
    """The file QEMU names a disk's top node by: the fd set of one passed by descriptor."""
    return Path(f"/dev/fdset/{index + 1}") if disk.by_fd else disk.path


def _backing_chain(image: Path) -> list[Path]:
    """The backing files under `image`, nearest first, each as the layer above names it."""
    chain: list[Path] = []
    layer = image
    while len(chain) < _MAX_CHAIN and layer.is_file() and (name := _backing_named_by(layer)):
        chain.append(name)
        layer = layer.parent / name  # a relative name is relative to the layer naming it
    return chain


def _backing_named_by(image: Path) -> Path | None:
    """The backing file a qcow2 image's header names (None for another file, or no backing)."""
    with image.open("rb") as file:
        header = file.read(4 + 4 + _QCOW2_BACKING.size)
        if len(header) < 4 + 4 + _QCOW2_BACKING.size or not header.startswith(_QCOW2_MAGIC):
            return None
        offset, size = _QCOW2_BACKING.unpack_from(header, 8)
        if offset == 0 or size == 0:
            return None
        file.seek(offset)
        return Path(file.read(size).decode())


# mypy proves here that the fakes implement the seam.
_FAKE_VM: type[Vm] = FakeVm
_FAKE_DRIVER: type[VmmDriver] = FakeDriver
