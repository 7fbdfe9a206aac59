"""Named network namespaces (iproute2-compatible, under /run/netns) and running code inside them.

The network namespace is a per-thread attribute on Linux, and sockets stay in the namespace they
were created in. So instead of forking helper processes (what pyroute2 and `ip netns exec` do),
work for a netns runs in a fresh thread that enters it; the thread dies afterwards, so no pooled
thread is ever left in the wrong namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NETNS_RUN_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000
_MS_REC = 0x4000
_MS_BIND = 0x1000
_MS_SHARED = 1 << 20
_MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_run_dir_lock = threading.Lock()
_run_dir_ready = False


def netns_path(name: str) -> str:
    return os.path.join(NETNS_RUN_DIR, name)


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


def pids_in_netns(names: list[str]) -> list[int]:
    """Processes that run in any of the named netns (found by the namespace's inode)."""
    wanted: set[int] = set()
    for name in names:
        with contextlib.suppress(OSError):
            wanted.add(os.stat(netns_path(name)).st_ino)
    found: list[int] = []
    for entry in os.listdir("/proc") if wanted else []:
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}/ns/net").st_ino in wanted:
                    found.append(int(entry))
    return found


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def create_and_enter_netns(name: str) -> None:
    """Move the calling thread into a new netns and pin it at /run/netns/<name> (as `ip netns
    add` would). Raises FileExistsError if the name is taken."""
    _ensure_run_dir()
    path = netns_path(name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    try:
        _check(_libc.unshare(_CLONE_NEWNET), f"unshare netns {name}")
        _check(
            _libc.mount(b"/proc/thread-self/ns/net", path.encode(), b"none", _MS_BIND, None),
            f"bind netns {name}",
        )
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def enter_netns(name: str) -> None:
    """Move the calling thread into an existing named netns."""
    fd = os.open(netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, _CLONE_NEWNET), f"setns {name}")
    finally:
        os.close(fd)


def remove_netns(name: str) -> bool:
    """Unpin a named netns; False if it did not exist. The kernel frees it once nothing (process,
    open fd) still holds it."""
    path = netns_path(name)
    if not os.path.exists(path):
        return False
    if _libc.umount2(path.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # EINVAL: not mounted (a half-created entry)
            raise OSError(err, f"umount netns {name}: {os.strerror(err)}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


async def run_in_fresh_thread(fn: Callable[[], T], name: str) -> T:
    """Run blocking ``fn`` in a new thread (which may switch namespaces freely). If the caller is
    cancelled, wait for ``fn`` to finish anyway so that cleanup never races the work."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = fn()
        except BaseException as exc:
            loop.call_soon_threadsafe(deliver, None, exc)
        else:
            loop.call_soon_threadsafe(deliver, result, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await done
        raise


def _ensure_run_dir() -> None:
    """Make /run/netns a shared mount, as iproute2 does, so netns pins created here propagate to
    mount namespaces made later (e.g. by `ip netns exec`)."""
    global _run_dir_ready
    with _run_dir_lock:
        if _run_dir_ready:
            return
        os.makedirs(NETNS_RUN_DIR, exist_ok=True)
        run_dir = NETNS_RUN_DIR.encode()
        if _libc.mount(b"", run_dir, b"none", _MS_SHARED | _MS_REC, None) != 0:
            _check(_libc.mount(run_dir, run_dir, b"none", _MS_BIND | _MS_REC, None), "bind rundir")
            _check(_libc.mount(b"", run_dir, b"none", _MS_SHARED | _MS_REC, None), "share rundir")
        _run_dir_ready = True


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
