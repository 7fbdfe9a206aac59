"""Run build tools as asyncio subprocesses and turn their failures into typed errors."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

from aenv_common.errors import Internal, Unavailable

log = logging.getLogger(__name__)

# Which Debian package provides each host tool the builds need, for actionable error messages.
TOOL_PACKAGES: dict[str, str] = {
    "apt-get": "apt",
    "apt-cache": "apt",
    "dpkg-deb": "dpkg",
    "dpkg-query": "dpkg",
    "ldd": "libc-bin",
    "lz4": "lz4",
    "mkfs.ext4": "e2fsprogs",
    "qemu-img": "qemu-utils",
    "mmdebstrap": "mmdebstrap",
    "busybox": "busybox-static",
    "python3.11": "python3.11",
    "gcc": "gcc",
    "readelf": "binutils",
    "nm": "binutils",
    "nice": "coreutils",
}


def require_tool(name: str) -> str:
    """Return the absolute path of a host tool, or say which package installs it."""
    found = shutil.which(name)
    if found is None:
        package = TOOL_PACKAGES.get(name, name)
        raise Unavailable(f"host tool {name!r} is missing: run `apt-get install {package}`")
    return found


async def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    nice: int = 0,
) -> bytes:
    """Run a command to completion; return stdout, raise Internal with its stderr on failure.

    `nice` > 0 runs it (and what it starts) at that lower CPU priority. Cancelled (a node agent
    stopping during a background build), it kills the command and everything it started before
    passing the cancellation on: the build's temporary tree is removed next, which must not
    happen under a process still writing into it, and a stop must not wait for a build."""
    args = [str(a) for a in argv]
    args[0] = require_tool(args[0]) if "/" not in args[0] else args[0]
    if nice > 0:
        args = [require_tool("nice"), "-n", str(nice), *args]
    log.debug("run", extra={"argv": args, "cwd": str(cwd) if cwd else None})
    proc = await _spawn(args, cwd, env, piped_stdin=stdin is not None)
    try:
        out, err = await proc.communicate(stdin)
    except asyncio.CancelledError:
        await _kill_group(proc)
        raise
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-2000:]
        name = Path(args[3 if nice > 0 else 0]).name
        raise Internal(f"{name} failed (exit {proc.returncode}): {tail}")
    return out


async def _spawn(
    args: list[str], cwd: Path | None, env: dict[str, str] | None, *, piped_stdin: bool
) -> asyncio.subprocess.Process:
    """The command started in a process group of its own, so that a cancellation reaches what
    it started (mmdebstrap's apt, dpkg). Cancelled while it starts, it still waits for the
    start and kills the whole group: asyncio alone would kill only the first process, and
    leave its children running."""
    spawning = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if piped_stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        process_group=0,
    ))
    try:
        return await asyncio.shield(spawning)
    except asyncio.CancelledError:
        await _kill_group(await spawning)
        raise


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()

