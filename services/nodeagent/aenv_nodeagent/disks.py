"""qcow2 layers: a sandbox writes only to its private overlay over a read-only backing chain."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aenv_common.errors import Internal


async def create_overlay(backing: Path, path: Path) -> None:
    """A new empty qcow2 layer at `path` whose reads fall through to `backing`."""
    proc = await asyncio.create_subprocess_exec(
        "qemu-img", "create", "-q", "-f", "qcow2", "-F", _format_of(backing),
        "-b", str(backing), str(path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise Internal(f"qemu-img create overlay failed: {err.decode(errors='replace').strip()}")


def _format_of(image: Path) -> str:
    with image.open("rb") as fh:
        return "qcow2" if fh.read(4) == b"QFI\xfb" else "raw"
