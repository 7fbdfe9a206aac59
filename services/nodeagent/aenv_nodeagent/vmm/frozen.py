"""Frozen copies of a stopped QEMU: forks of the process (made by `freeze.c`, preloaded) whose
memory the kernel keeps as it was at the fork while the guest runs on. A capture stops the guest
only for the fork, and reads its memory image from the copy afterwards. The same socket asks a
QEMU that never ran its guest to map another memory image over its RAM (`FreezeChannel.remap`).

A copy holds no descriptor and sleeps until it is killed (`release`): neither a QEMU that quits
nor an agent that dies ends it, so the agent's next run can still make the image from it
(`FrozenCopy.find`, by pid and start time) and kill those nothing needs (`stray_copies`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.errors import CaptureFailed, CaptureLostVm, RemapFailed

FREEZE_FD_ENV = "AENV_FREEZE_FD"  # the inherited socket the library serves
COPY_NAME = "aenv-frozen"  # a copy's /proc/<pid>/comm (freeze.c)
_ANSWER = struct.Struct("=i")  # the copy's pid, or -errno
_ANSWER_TIMEOUT_S = 10.0  # a fork takes milliseconds; QEMU hung otherwise
_EXIT_TIMEOUT_MS = 30_000  # a killed copy unmaps its memory first: a GiB takes well under this


@dataclass
class FrozenCopy:
    """A copy of QEMU's memory at the fork: read it at the addresses QEMU maps its RAM. The pid
    and its start time (clock ticks since boot) say which process it is across agent runs."""

    pid: int
    start_time: int
    _pidfd: int

    @classmethod
    def of_child(cls, pid: int) -> FrozenCopy:
        """A copy just made (our child, so its pid cannot be taken by another process yet)."""
        pidfd = os.pidfd_open(pid)
        return cls(pid, _start_time(pid), pidfd)

    @classmethod
    def find(cls, pid: int, start_time: int) -> FrozenCopy | None:
        """The copy an earlier run of the agent made, if it still lives."""
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        # Read after the pidfd is open: a pid reused since is told apart by its start time. (Not
        # by its name: a copy found right after the fork may not have renamed itself yet.)
        if _start_time(pid) != start_time:
            os.close(pidfd)
            return None
        return cls(pid, start_time, pidfd)

    def release(self) -> None:
        """Kill the copy and wait until it is gone (its memory unmapped). Blocking."""
        if self._pidfd < 0:
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # an earlier run's copy: init reaps it
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            poller.poll(_EXIT_TIMEOUT_MS)
        os.close(self._pidfd)
        self._pidfd = -1


def stray_copies(marker: str, keep: frozenset[int] = frozenset()) -> list[FrozenCopy]:
    """The live copies whose QEMU's command line holds `marker` (the node's state directory),
    but the `keep` pids: what an agent that died left, unless a snapshot still needs it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(entry.name)
            if _name(pid) == COPY_NAME and marker.encode() in (entry / "cmdline").read_bytes():
                copy = FrozenCopy.find(pid, _start_time(pid))
                if copy is not None:
                    found.append(copy)
    return found


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, counted from `state` (3)


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
    except OSError:
        return ""


class FreezeChannel:
    """The node agent's end of one QEMU's freeze socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = asyncio.Lock()

    @classmethod
    def pair(cls) -> tuple[FreezeChannel, socket.socket]:
        """A channel, and the socket to leave open in QEMU (preload.preload_env names it)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.settimeout(_ANSWER_TIMEOUT_S)
        return cls(ours), theirs

    async def freeze(self) -> FrozenCopy:
        """Fork QEMU (stopped, so that its memory is the guest's at one instant).

        :raise CaptureFailed: no copy was made; QEMU is as it was.
        :raise CaptureLostVm: QEMU closed its end (it exited)."""
        async with self._lock:
            return await asyncio.to_thread(self._freeze)

    async def remap(self, memory: Path) -> None:
        """Map the memory image `memory` (opened read-only here) over guest RAM, in place of the
        file QEMU mapped, and log writes to it from now on. Only while QEMU waits for its
        incoming state.

        :raise RemapFailed: it was not mapped (or not logged); the guest must not run."""
        try:
            fd = os.open(memory, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            raise RemapFailed(f"cannot open the memory image {memory}: {err.strerror}") from err
        try:
            async with self._lock:
                await asyncio.to_thread(self._remap, fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._sock.close()

    def _ask(self, request: bytes, fd: int | None = None) -> int | None:
        """One request (with a descriptor to hand over) and its answer; None: QEMU closed its
        end. :raise OSError:"""
        handed = [] if fd is None else [
            (socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=i", fd))]
        self._sock.sendmsg([request], handed)
        answer = self._sock.recv(_ANSWER.size)
        return _ANSWER.unpack(answer)[0] if len(answer) == _ANSWER.size else None

    def _remap(self, memory_fd: int) -> None:
        try:
            status = self._ask(b"R", memory_fd)
        except OSError as err:
            raise RemapFailed(f"cannot ask QEMU to map another memory image: {err}") from err
        if status is None:
            raise RemapFailed("QEMU closed its freeze socket")
        if status != 0:
            raise RemapFailed(f"QEMU could not map the memory image: {os.strerror(-status)}")

    def _freeze(self) -> FrozenCopy:
        try:
            pid = self._ask(b"F")
        except OSError as err:
            raise CaptureFailed(f"cannot ask QEMU for a frozen copy: {err}") from err
        if pid is None:
            raise CaptureLostVm("QEMU closed its freeze socket")
        if pid < 0:
            raise CaptureFailed(f"cannot fork QEMU: {os.strerror(-pid)}")
        try:
            return FrozenCopy.of_child(pid)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise CaptureFailed(f"cannot watch the frozen copy of QEMU: {err}") from err
