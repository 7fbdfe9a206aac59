"""Non-blocking reads and writes on raw file descriptors (pipes, pty masters) with asyncio."""

from __future__ import annotations

import asyncio
import errno
import os

READ_CHUNK = 64 * 1024


async def wait_fd(fd: int, writable: bool = False) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def try_read(fd: int, size: int = READ_CHUNK) -> bytes | None:
    """Bytes available now, b"" at EOF (EIO is how a pty master reports it), None if none yet."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await wait_fd(fd, writable=True)
            continue
        view = view[written:]
