"""Frozen copies of a stopped QEMU: forks of the process (made by `freeze.c`, preloaded) whose
memory the kernel keeps as it was at the fork while the guest runs on. A capture stops the guest
only for the fork, and reads its memory image from the copy afterwards.

The copy is the node agent's child. It holds no descriptor but its end of a pipe, and exits when
the agent closes the other end (`release`) or dies; a QEMU that quits meanwhile does not end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from dataclasses import dataclass

from aenv_common.errors import Internal

FREEZE_FD_ENV = "AENV_FREEZE_FD"  # the inherited socket the library serves
_ANSWER = struct.Struct("=i")  # the copy's pid, or -errno
_ANSWER_TIMEOUT_S = 10.0  # a fork takes milliseconds; QEMU hung otherwise


@dataclass
class FrozenCopy:
    """A copy of QEMU's memory at the fork: read it at the addresses QEMU maps its RAM."""

    pid: int
    _pipe: int

    def release(self) -> None:
        """Let the copy exit, and reap it. Blocking (its memory is unmapped first)."""
        if self._pipe < 0:
            return
        os.close(self._pipe)
        self._pipe = -1
        with contextlib.suppress(ChildProcessError):  # reaped already (SIGCHLD ignored)
            os.waitpid(self.pid, 0)


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
        """Fork QEMU (stopped, so that its memory is the guest's at one instant)."""
        async with self._lock:
            return await asyncio.to_thread(self._freeze)

    def close(self) -> None:
        self._sock.close()

    def _freeze(self) -> FrozenCopy:
        pipe_read, pipe_write = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                socket.send_fds(self._sock, [b"F"], [pipe_read])
                answer = self._sock.recv(_ANSWER.size)
            finally:
                os.close(pipe_read)
            if len(answer) != _ANSWER.size:
                raise Internal("QEMU closed its freeze socket")
            (pid,) = _ANSWER.unpack(answer)
            if pid < 0:
                raise Internal(f"cannot fork QEMU: {os.strerror(-pid)}")
        except BaseException as err:
            os.close(pipe_write)
            if isinstance(err, OSError):
                raise Internal(f"cannot ask QEMU for a frozen copy: {err}") from err
            raise
        return FrozenCopy(pid, pipe_write)
