"""One platform per data directory: an exclusive flock on `$AENV_HOME/aenv.pid`.

flock is released by the kernel when the holder dies, so a crashed `aenv up` never leaves a stale
lock behind; the PID written into the file is for messages and `aenv status`.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from aenv_common.errors import Conflict

PIDFILE_NAME = "aenv.pid"


class HomeLock:
    def __init__(self, home: Path) -> None:
        self.path = home / PIDFILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise Conflict(
                f"aenv is already running on {self.path.parent} (pid {holder}); "
                "stop it first or use another --home"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # The file stays (unlinking it would race with an instance opening it): empty means free.
        os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = None


def lock_holder(home: Path) -> int | None:
    """PID of the `aenv up` holding `home`, or None when no platform runs there."""
    path = home / PIDFILE_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 32).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)  # also drops our probe lock, if we got it
    return None
