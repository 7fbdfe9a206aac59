"""Starting, adopting and stopping QEMU processes; every stop reaps (or outwaits) them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.vmm.errors import VmStartError

logger = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 2048
# The exit status of a process we did not start goes to whoever reaps it (init).
UNKNOWN_EXIT_STATUS = -255


class VmProcess(Protocol):
    """What the VM driver needs of its QEMU process: asyncio's child process, or an adopted one."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


class AdoptedProcess:
    """A QEMU an earlier node agent started, still running. It is not our child, so its exit is
    watched through a pidfd, which also makes signals safe from pid reuse."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)  # ProcessLookupError when it is gone
        self.returncode: int | None = None
        self._exited: asyncio.Future[None] | None = None

    async def wait(self) -> int:
        if self.returncode is None:
            await asyncio.shield(self._exit_future())
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self._pidfd, sig)

    def close(self) -> None:
        """Stop watching a process that is not taken over after all (it stays running)."""
        if self._exited is None and self.returncode is None:
            os.close(self._pidfd)
            self.returncode = UNKNOWN_EXIT_STATUS

    def _exit_future(self) -> asyncio.Future[None]:
        if self._exited is None:
            loop = asyncio.get_running_loop()
            self._exited = exited = loop.create_future()
            loop.add_reader(self._pidfd, self._on_exit, loop, exited)
        return self._exited

    def _on_exit(self, loop: asyncio.AbstractEventLoop, exited: asyncio.Future[None]) -> None:
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = UNKNOWN_EXIT_STATUS
        if not exited.done():
            exited.set_result(None)


def qemu_owning(pidfile: Path) -> int | None:
    """The pid of the live QEMU that wrote `pidfile` and still holds it open (QEMU keeps its
    pidfile open), else None. Told by the file itself, not its name: a jailed QEMU names it by
    its path in the jail's root, which a later rename of its directory on the host leaves."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        if b"qemu-system" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        wanted = os.stat(pidfile)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                held = os.stat(f"/proc/{pid}/fd/{fd}")
                if (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino):
                    return pid
    return None


async def spawn(
    argv: Sequence[str], stderr_log: Path, pass_fds: Sequence[int] = (),
    env: Mapping[str, str] | None = None,
) -> asyncio.subprocess.Process:
    """Start `argv` with stderr to a file: a pipe would need draining for the VM's whole life.
    `pass_fds` stay open in the child (`argv` must exec, not close them); `env` is added to
    the agent's environment.

    :raise VmStartError: it could not be executed."""
    with stderr_log.open("wb") as stderr:
        try:
            # Own session: a signal to the agent's process group does not take its VMs down.
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                env={**os.environ, **env} if env else None,
            )
        except OSError as err:
            raise VmStartError(f"cannot start {argv[0]}: {err}") from err


async def stop(proc: VmProcess, grace: float) -> None:
    """Wait `grace` seconds for exit, then SIGTERM, then SIGKILL; always reaps."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is not None:
            return
        if sig is not None:
            _signal(proc, sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout=None if sig is signal.SIGKILL else grace)
        except TimeoutError:
            logger.warning("QEMU did not exit in time", extra={"pid": proc.pid, "signal": str(sig)})


def _signal(proc: VmProcess, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass  # it exited between the check and the signal; wait() reaps it


def stderr_tail(stderr_log: Path) -> str:
    try:
        with stderr_log.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - _STDERR_TAIL_BYTES))
            return log.read().decode(errors="replace").strip()
    except OSError:
        return ""
