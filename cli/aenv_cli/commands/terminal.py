"""The local terminal of an interactive command: its size, raw mode, window resizes, input and
output as bytes. `Terminal` is the seam the tests fake."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
import termios
import tty
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol

READ_CHUNK = 64 * 1024
DEFAULT_SIZE = (80, 24)  # columns, rows: when there is no terminal to ask


class Terminal(Protocol):
    def interactive(self) -> bool:
        """Are stdin and stdout terminals?"""

    def size(self) -> tuple[int, int]:
        """(columns, rows) of the window."""

    def raw(self) -> contextlib.AbstractContextManager[None]:
        """Raw mode while inside: every key (Ctrl-C included) is input; restored on exit."""

    def on_resize(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls `callback` on the event loop at each window resize; returns the undo."""

    def read_input(self) -> AsyncIterator[bytes]:
        """Chunks of stdin as they come, until end of file."""

    def write(self, data: bytes) -> None:
        """To stdout, unbuffered."""

    def write_err(self, data: bytes) -> None:
        """To stderr, unbuffered."""


class LocalTerminal:
    """The process's own stdin (fd 0), stdout (fd 1) and stderr (fd 2)."""

    def __init__(self, stdin: int = 0, stdout: int = 1, stderr: int = 2) -> None:
        self._in, self._out, self._err = stdin, stdout, stderr

    def interactive(self) -> bool:
        return os.isatty(self._in) and os.isatty(self._out)

    def size(self) -> tuple[int, int]:
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError):
                columns, rows = os.get_terminal_size(fd)
                return columns, rows
        return DEFAULT_SIZE

    @contextlib.contextmanager
    def raw(self) -> Iterator[None]:
        if not os.isatty(self._in):
            yield
            return
        saved = termios.tcgetattr(self._in)
        tty.setraw(self._in)
        try:
            yield
        finally:
            termios.tcsetattr(self._in, termios.TCSADRAIN, saved)

    def on_resize(self, callback: Callable[[], None]) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGWINCH, callback)

        def undo() -> None:
            loop.remove_signal_handler(signal.SIGWINCH)

        return undo

    async def read_input(self) -> AsyncIterator[bytes]:
        if stat.S_ISREG(os.fstat(self._in).st_mode):
            # A file never blocks (and epoll refuses files): read it straight.
            while chunk := os.read(self._in, READ_CHUNK):
                yield chunk
            return
        # A reader on the loop, never a thread: a thread blocked reading a terminal would keep
        # the process alive after the command ended.
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        loop.add_reader(self._in, lambda: queue.put_nowait(self._read_some()))
        try:
            while chunk := await queue.get():
                yield chunk
        finally:
            loop.remove_reader(self._in)

    def _read_some(self) -> bytes:
        try:
            return os.read(self._in, READ_CHUNK)
        except OSError:  # the terminal went away (EIO on a closed pty): end of input
            return b""

    def write(self, data: bytes) -> None:
        _write_all(self._out, data)

    def write_err(self, data: bytes) -> None:
        _write_all(self._err, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[written:]


def flush_std_streams() -> None:
    """Python's buffered streams first, before bytes go to the fds directly."""
    sys.stdout.flush()
    sys.stderr.flush()
