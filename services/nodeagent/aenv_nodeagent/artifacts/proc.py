"""Run build tools as asyncio subprocesses and turn their failures into typed errors."""

from __future__ import annotations

import asyncio
import logging
import shutil
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
) -> bytes:
    """Run a command to completion; return stdout, raise Internal with its stderr on failure."""
    args = [str(a) for a in argv]
    args[0] = require_tool(args[0]) if "/" not in args[0] else args[0]
    log.debug("run", extra={"argv": args, "cwd": str(cwd) if cwd else None})
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-2000:]
        raise Internal(f"{Path(args[0]).name} failed (exit {proc.returncode}): {tail}")
    return out
