"""One QEMU microVM process, driven over QMP: launch, pause/resume, capture and restore."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from qemu.qmp import EventListener, ExecuteError, QMPClient, QMPError

from aenv_common.errors import AenvError, Conflict, DeadlineExceeded, NotFound
from aenv_nodeagent.confinement import VmCgroup
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.vmm import jailed_files, migration, process, qemu_disks, qmp_connect, spawn
from aenv_nodeagent.vmm.argv import QEMU_BINARY, VmFiles
from aenv_nodeagent.vmm.confined import Confined, VmJail
from aenv_nodeagent.vmm.disk_errors import wait_disk_full
from aenv_nodeagent.vmm.errors import (
    CaptureFailed,
    QmpCommandFailed,
    QmpConnectionLost,
    QmpError,
    RemapFailed,
    VmExited,
    VmmError,
    capture_error,
)
from aenv_nodeagent.vmm.frozen import FreezeChannel, FrozenCopy
from aenv_nodeagent.vmm.qemu_disks import DiskChain
from aenv_nodeagent.vmm.spec import VmSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")


class QemuVm:
    """A running QEMU process and its QMP session. Create with `launch`; end with `shutdown`."""

    def __init__(
        self,
        proc: process.VmProcess,
        qmp: QMPClient,
        files: VmFiles,
        *,
        incoming: bool,
        jail: VmJail | None = None,
        confined: Confined | None = None,
    ) -> None:
        self._proc = proc
        self._qmp = qmp
        self.files = files
        self._jail = jail or VmJail()
        self.confined = confined or Confined()  # held until the shutdown reaped QEMU
        self._awaiting_restore = incoming
        self._ignore_shared: bool | None = None  # as last set in QEMU
        self._shutdown_task: asyncio.Task[None] | None = None
        # Started with the dirty log armed over its RAM (vmm/dirtylog.py): every write the guest
        # made since QEMU mapped the RAM file is logged.
        self.logs_writes = False
        self._freezer: FreezeChannel | None = None  # the preload library's, when it serves one
        # Latest duration of every phase so far (launch, capture, restore), in milliseconds.
        self.timings: dict[str, float] = {}

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def cgroup(self) -> VmCgroup | None:
        return self.confined.cgroup

    @property
    def uid(self) -> int | None:
        """The uid QEMU runs as, when jailed."""
        return self.confined.uid

    @property
    def exit_code(self) -> int | None:
        return self._proc.returncode

    @property
    def stopping(self) -> bool:
        """Whether QEMU has exited or is being shut down."""
        return self._shutdown_task is not None or self._proc.returncode is not None

    @classmethod
    async def launch(
        cls,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
        qemu_binary: str = QEMU_BINARY,
        start_timeout: float = 10.0,
        jail: VmJail | None = None,
    ) -> QemuVm:
        """Start QEMU and return once its QMP session is up. `argv_prefix` must exec QEMU (as
        `ip netns exec NS` does), not fork it: the VM is tracked by the child's PID. QEMU runs
        confined by `jail` (its own cgroup and rlimits; jailed: its uid, root and seccomp
        filter) from its first instruction.

        :raise VmStartError: QEMU did not start, or did not open QMP within `start_timeout` s.
        :raise AenvError: its confinement could not be made."""
        jail = jail or VmJail()
        clock = PhaseTimer("qemu")
        with clock.phase("exec_to_qmp"):
            started = await spawn.start(
                spec, workdir, jail, incoming=incoming, argv_prefix=argv_prefix,
                console_log=console_log, qemu_binary=qemu_binary, start_timeout=start_timeout)
        confined = started.confined
        vm = cls(started.proc, started.qmp, started.files, incoming=incoming, jail=jail,
                 confined=confined)
        vm.logs_writes = spec.copy_on_write_preload
        vm._freezer = started.freezer
        vm.timings.update(clock.phases_ms)
        logger.info(
            "QEMU started",
            extra={"pid": vm.pid, "accel": str(spec.accel.accel), "incoming": incoming,
                   "workdir": str(workdir), "uid": confined.uid,
                   "cgroup": confined.cgroup.name if confined.cgroup else None,
                   "exec_to_qmp_ms": clock.phases_ms["exec_to_qmp"]},
        )
        return vm

    @classmethod
    async def attach(
        cls, workdir: Path, time_limit: float = 5.0, jail: VmJail | None = None
    ) -> QemuVm:
        """Take over the QEMU an earlier node agent launched in `workdir` (NotFound when none
        runs there). Its QMP socket is in `workdir`, or where its command line put it; its
        cgroup is `jail`'s to remove from now on.

        :raise NotFound: no QEMU runs there.
        :raise VmStartError: its QMP session did not open within `time_limit` s."""
        jail = jail or VmJail()
        files = VmFiles.in_dir(workdir)
        pid = process.qemu_owning(files.pidfile)
        if pid is None:
            raise NotFound(f"no QEMU runs in {workdir}")
        try:
            proc = process.AdoptedProcess(pid)
        except ProcessLookupError:
            raise NotFound(f"no QEMU runs in {workdir}") from None
        socket_path = files.qmp_socket
        if not socket_path.exists():
            socket_path = qmp_connect.socket_of(pid) or socket_path
        try:
            qmp = await qmp_connect.connect(proc, socket_path, time_limit)
        except BaseException:
            proc.close()  # QEMU stays running; it is not ours after all
            raise
        confined = jail.adopt(pid)
        logger.info("QEMU adopted", extra={
            "pid": pid, "workdir": str(workdir), "uid": confined.uid,
            "cgroup": confined.cgroup.name if confined.cgroup else None})
        return cls(proc, qmp, VmFiles(socket_path, files.pidfile, files.stderr_log),
                   incoming=False, jail=jail, confined=confined)

    async def __aenter__(self) -> QemuVm:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    async def execute(self, command: str, arguments: Mapping[str, object] | None = None) -> object:
        """Run one QMP command. :raise QmpCommandFailed: QEMU refused it.
        :raise QmpConnectionLost: the session broke (QEMU exited or closed it)."""
        try:
            return await self._qmp.execute(command, arguments)
        except ExecuteError as err:
            raise QmpCommandFailed(f"QMP {command} failed: {err.error_class}: {err}", command,
                                   err.error_class) from err
        except (QMPError, OSError) as err:
            raise QmpConnectionLost(f"QMP {command}: lost QEMU (pid {self.pid}): {err}") from err

    async def status(self) -> str:
        """QEMU's run state. :raise QmpError:"""
        reply = await self.execute("query-status")
        if not isinstance(reply, dict) or not isinstance(reply.get("status"), str):
            raise QmpCommandFailed(f"unexpected query-status reply: {reply!r}", "query-status")
        return str(reply["status"])

    async def pause(self) -> None:
        """:raise QmpError:"""
        await self.execute("stop")

    async def resume(self) -> None:
        """:raise QmpError:"""
        await self.execute("cont")

    async def capture(
        self, state_path: Path, time_limit: float = 30.0, *, ignore_shared: bool = True
    ) -> dict[str, float]:
        """Stop the VM and save its device state (not its RAM, which stays in the memory file) to
        `state_path`. The VM stays stopped; disks are flushed and consistent. Returns phase
        durations in ms. `ignore_shared=False` saves share=on RAM too (share=off RAM is always
        saved); a full stream can then be loaded into a share=on RAM file.

        :raise CaptureFailed: nothing saved; QEMU is stopped, to resume (or retry).
        :raise CaptureLostVm: QEMU exited or its session broke: the VM is gone.
        :raise NotFound: no directory for `state_path`. :raise DeadlineExceeded: the migration
            did not end in `time_limit` s (it was cancelled; QEMU stays stopped)."""
        clock = PhaseTimer("qemu")
        try:
            with clock.phase("stop"):
                await self.execute("stop")
            with clock.phase("migrate"):
                await self._set_migration_capabilities(ignore_shared=ignore_shared)
                try:
                    fd = migration.open_state_file(state_path,
                                                   os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    await migration.via_file(self, "migrate", fd, time_limit)
                except AenvError:
                    migration.discard_partial_state(state_path)
                    raise
        except VmmError as err:
            raise capture_error(err) from err
        return self._record(clock)

    async def save_device_state(self, state_path: Path) -> None:
        """Save every device's state but no RAM (QMP xen-save-devices-state, which any QEMU
        build has) to `state_path`; the VM must be stopped and stays so. For delta captures
        (vmm/delta.py), which take the RAM from the process.

        :raise Conflict: the VM runs. :raise NotFound: no directory for `state_path`.
        :raise CaptureFailed: nothing saved; the VM is as it was. :raise CaptureLostVm:"""
        try:
            await self._save_device_state(state_path)
        except VmmError as err:
            raise capture_error(err) from err

    async def _save_device_state(self, state_path: Path) -> None:
        if await self.status() == "running":
            raise Conflict(f"QEMU {self.pid} must be stopped to save its device state")
        # Through a descriptor: a jailed QEMU neither sees nor may create the file.
        fd = migration.open_state_file(state_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            fdset = await self._add_fd(fd)
            try:
                await self.execute("xen-save-devices-state",
                                   {"filename": f"/dev/fdset/{fdset}", "live": False})
            finally:
                await self.execute("remove-fd", {"fdset-id": fdset})
        except AenvError:
            migration.discard_partial_state(state_path)
            raise
        finally:
            os.close(fd)

    async def restore(
        self, state_path: Path, time_limit: float = 30.0, *, run: bool = True,
        ignore_shared: bool = True,
    ) -> dict[str, float]:
        """Load device state into this incoming VM (RAM comes from its memory file) and run it
        (or, with `run=False`, leave it stopped). `ignore_shared` must be as at the capture.
        Returns phase durations in ms.

        :raise Conflict: not launched incoming, or restored already. :raise NotFound: no state.
        :raise MigrationError, VmExited: QEMU could not load it (and exits). :raise QmpError:
        :raise DeadlineExceeded: the load did not end in `time_limit` s."""
        if not self._awaiting_restore:
            raise Conflict(f"QEMU {self.pid} was not launched incoming, or has already restored")
        clock = PhaseTimer("qemu")
        with clock.phase("migrate_incoming"):
            await self._set_migration_capabilities(ignore_shared=ignore_shared)
            fd = migration.open_state_file(state_path, os.O_RDONLY)
            self._awaiting_restore = False  # QEMU accepts one incoming migration, even a failed one
            await migration.via_file(self, "migrate-incoming", fd, time_limit)
        if run:
            with clock.phase("cont"):
                await self.execute("cont")
        return self._record(clock)

    async def disk_chain(self, disk_id: str) -> DiskChain:
        """The layers under disk `disk_id` as QEMU has them open (vmm/qemu_disks.py).
        :raise NotFound: QEMU has no such disk. :raise QmpError:"""
        return await qemu_disks.disk_chain(self, disk_id)

    async def switch_disk_to_overlay(self, top_node: str, new_node: str, overlay: Path) -> None:
        """Make `overlay` the disk's new top layer, freezing the old one (vmm/qemu_disks.py);
        jailed, the frozen layer is no longer QEMU's to write. :raise QmpError:"""
        frozen = await qemu_disks.node_file(self, top_node) if self.uid is not None else None
        await qemu_disks.switch_disk_to_overlay(self, top_node, new_node,
                                                self._writable_by_qemu(overlay))
        if frozen is not None:
            os.chown(frozen, 0, 0)

    async def close_writable_fds(self) -> None:
        """Drop the writable descriptors of by-fd disks now frozen (vmm/qemu_disks.py).
        :raise QmpError:"""
        await qemu_disks.close_writable_fds(self)

    async def stream_disk(self, top_node: str, base: Path, time_limit: float = 600.0) -> None:
        """Merge the layers between `top_node` and `base` into it (vmm/qemu_disks.py).
        :raise DiskJobError: the job failed. :raise VmExited: :raise QmpError:
        :raise DeadlineExceeded: it did not end in `time_limit` s."""
        await qemu_disks.stream_disk(self, top_node, base, time_limit)

    async def run_job(
        self, command: str, arguments: Mapping[str, object], events: tuple[str, ...],
        until: Callable[[EventListener], Awaitable[T]], time_limit: float,
    ) -> T:
        """Run QMP `command` and await `until` over the `events` QEMU emits from then on,
        failing fast if QEMU exits, and with DeadlineExceeded after `time_limit` s.
        :raise VmExited: :raise QmpError: :raise DeadlineExceeded:"""
        with self._qmp.listener(events) as listener:
            await self.execute(command, arguments)
            return await self.unless_exited(until(listener), time_limit, what=command)

    @property
    def freezes(self) -> bool:
        """Whether `freeze` can fork this QEMU (it was launched by this agent with the preload
        library, which serves the agent's end of its socket)."""
        return self._freezer is not None

    async def freeze(self) -> FrozenCopy:
        """A frozen copy of the memory of this QEMU, which must be stopped (vmm/frozen.py).

        :raise CaptureFailed: no copy was made (this QEMU cannot be, or the fork failed); the
            VM is as it was."""
        if self._freezer is None:
            raise CaptureFailed(f"QEMU {self.pid} cannot be frozen: it was not launched to be")
        return await self._freezer.freeze()

    async def repoint(self, memory: Path, top_node: str, top_layer: Path) -> None:
        """Make this VM, launched incoming on a template's RAM file and an empty overlay over its
        disk, the restore target of a capture of a sandbox of that template: `memory` (an image
        of the RAM's size) mapped copy-on-write over guest RAM in its place, writes logged from
        then on; `top_layer` and the layers under it down to the disk's backing put under
        `top_node`, whose header must name `top_layer` already (vmm/qemu_disks.py).

        :raise Conflict: not waiting for its incoming state.
        :raise RemapFailed: not re-pointed; its guest must never run."""
        if not self._awaiting_restore:
            raise Conflict(f"QEMU {self.pid} is not waiting for an incoming state")
        if self._freezer is None:
            raise RemapFailed(f"QEMU {self.pid} was not launched with the preload library")
        await self._freezer.remap(memory)
        try:
            layers = [top_layer, *jailed_files.backing_chain(top_layer)]
            await qemu_disks.insert_layers(self, top_node, layers, self._add_fd)
        except (VmmError, NotFound, OSError) as err:
            raise RemapFailed(f"QEMU {self.pid} could not take the disk layers: {err}") from err

    async def release(self) -> None:
        """Let go of QEMU without stopping it (a VM not taken over after all)."""
        self._close_freezer()
        self._jail.forget(self.confined)
        await qmp_connect.disconnect(self._qmp)
        if isinstance(self._proc, process.AdoptedProcess):
            self._proc.close()

    async def shutdown(self, grace: float = 2.0) -> None:
        """Quit QEMU (QMP quit, then SIGTERM, then SIGKILL), reap it and remove its files.
        Idempotent, also when called concurrently."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.ensure_future(self._shutdown(grace))
        try:
            await asyncio.shield(self._shutdown_task)
        except asyncio.CancelledError:
            # A cancelled caller still leaves no QEMU behind: finish (bounded by grace + SIGKILL).
            await self._shutdown_task
            raise

    async def _shutdown(self, grace: float) -> None:
        try:
            await self._request_quit(grace)
            await process.stop(self._proc, grace)
        finally:
            self._close_freezer()
            await qmp_connect.disconnect(self._qmp)
            qmp_connect.remove_files(self.files)
            if self._proc.returncode is not None:  # else still running: its cgroup stays
                self._jail.leave(self.confined)
        logger.info("QEMU stopped", extra={"pid": self.pid, "exit_code": self._proc.returncode})

    def _close_freezer(self) -> None:
        if self._freezer is not None:
            self._freezer.close()
            self._freezer = None

    async def _request_quit(self, grace: float) -> None:
        if self._proc.returncode is not None:
            return
        try:
            await asyncio.wait_for(self._qmp.execute("quit"), grace)
        except (QMPError, OSError, TimeoutError) as err:
            # quit often races the socket closing; the signals in process.stop cover the rest.
            logger.debug("QMP quit did not complete", extra={"pid": self.pid, "error": str(err)})

    def _writable_by_qemu(self, path: Path) -> Path:
        """`path` (in the VM's directory) as QEMU names it, for a file it is to write: jailed,
        made for its uid in its root (its directory is QEMU's own only to pass through)."""
        if self.uid is None:
            return path
        path.touch()
        os.chown(path, self.uid, self.uid)
        return jailed_files.inside(self.pid, path)

    async def _set_migration_capabilities(self, *, ignore_shared: bool) -> None:
        if self._ignore_shared is None:
            await self.execute("migrate-set-parameters",
                               {"max-bandwidth": migration.UNTHROTTLED_BYTES_PER_S})
        if self._ignore_shared != ignore_shared:
            await self.execute("migrate-set-capabilities",
                               {"capabilities": migration.migration_capabilities(ignore_shared)})
            self._ignore_shared = ignore_shared

    def listener(self, events: str) -> contextlib.AbstractContextManager[EventListener]:
        """Events QEMU emits from now on while the context lasts."""
        return self._qmp.listener(events)

    async def _add_fd(self, fd: int) -> int:
        """Hand QEMU a copy of `fd` in an fd set of its own, which QEMU opens as
        /dev/fdset/<id> (the id returned)."""
        try:
            self._qmp.send_fd_scm(fd)
        except (QMPError, OSError) as err:
            raise QmpConnectionLost(
                f"cannot pass a file descriptor to QEMU {self.pid}: {err}") from err
        reply = await self.execute("add-fd")
        if not isinstance(reply, dict) or not isinstance(reply.get("fdset-id"), int):
            raise QmpCommandFailed(f"unexpected add-fd reply: {reply!r}", "add-fd")
        return int(reply["fdset-id"])

    async def pass_fd(self, fd: int, name: str) -> None:
        """Hand QEMU a copy of `fd`, named `name` for the commands that take one.
        :raise QmpError:"""
        try:
            self._qmp.send_fd_scm(fd)
        except (QMPError, OSError) as err:
            raise QmpConnectionLost(
                f"cannot pass a file descriptor to QEMU {self.pid}: {err}") from err
        await self.execute("getfd", {"fdname": name})

    async def exit_status(self, time_limit: float = 1.0) -> int | None:
        """The status of a QEMU that exited (negative: the signal that ended it), once reaped;
        None when it cannot be known (an adopted QEMU is not this agent's child) or QEMU was
        not reaped within `time_limit` s."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proc.wait(), time_limit)
        status = self._proc.returncode
        return None if status is None or status == process.UNKNOWN_EXIT_STATUS else status

    async def disk_full(self) -> str:
        """Returns once QEMU stopped the guest for a disk write the host had no room for
        (vmm/disk_errors.py); the disk's name. :raise QmpError:"""
        return await wait_disk_full(self)

    async def failure_reason(self) -> str:
        """QEMU's reason for a failed migration. A failed incoming migration makes QEMU exit,
        so then the reason is in its stderr."""
        try:
            reply = await self.execute("query-migrate")
        except QmpError:
            await process.stop(self._proc, grace=1.0)
            return f"QEMU exited (status {self._proc.returncode}): " + process.stderr_tail(
                self.files.stderr_log)
        return str(reply.get("error-desc", "no error reported")) if isinstance(reply, dict) else ""

    async def unless_exited(self, awaitable: Awaitable[T], time_limit: float, *, what: str) -> T:
        """Await `awaitable`, failing fast if QEMU exits first (e.g. a failed incoming
        migration makes QEMU exit).

        :raise VmExited: QEMU exited first.
        :raise DeadlineExceeded: `awaitable` did not end within `time_limit` s."""
        work = asyncio.ensure_future(awaitable)
        exited = asyncio.ensure_future(self._proc.wait())
        try:
            await asyncio.wait({work, exited}, timeout=time_limit,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, exited):
                task.cancel()
        if work.done() and not work.cancelled():
            return work.result()
        if exited.done() and not exited.cancelled():
            tail = process.stderr_tail(self.files.stderr_log)
            raise VmExited(f"QEMU {self.pid} exited during {what} "
                           f"(status {self._proc.returncode}): {tail}")
        raise DeadlineExceeded(f"{what} did not finish within {time_limit}s (QEMU {self.pid})")

    def _record(self, clock: PhaseTimer) -> dict[str, float]:
        self.timings.update(clock.phases_ms)
        logger.info("QEMU phases", extra={"pid": self.pid, "phases_ms": clock.phases_ms})
        return dict(clock.phases_ms)

