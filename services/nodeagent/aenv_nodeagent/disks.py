"""qcow2 layers: a sandbox writes only to its private overlay over a read-only backing chain."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from aenv_common.errors import Internal

_QCOW2_MAGIC = b"QFI\xfb"


async def create_overlay(backing: Path, path: Path, *, like: Path | None = None) -> None:
    """A new empty qcow2 layer at `path` whose reads fall through to `backing` (which may not
    exist yet when it is to be a link to `like`).

    The size is read from the backing's header, so qemu-img never opens the backing: it may be
    held by a running QEMU (whose write lock would refuse even a read-only open)."""
    source = like or backing
    backing_format = _format_of(source)
    size = qcow2_virtual_size(source) if backing_format == "qcow2" else source.stat().st_size
    await _qemu_img("create", "-q", "-f", "qcow2", "-F", backing_format,
                    "-b", str(backing), "-u", str(path), str(size))


def qcow2_virtual_size(image: Path) -> int:
    """The guest-visible size recorded in a qcow2 header (bytes 24-31, big-endian)."""
    with image.open("rb") as fh:
        header = fh.read(32)
    if len(header) < 32 or header[:4] != _QCOW2_MAGIC:
        raise Internal(f"{image} is not a qcow2 image")
    size: int = struct.unpack(">Q", header[24:32])[0]
    return size


def _format_of(image: Path) -> str:
    try:
        with image.open("rb") as fh:
            return "qcow2" if fh.read(4) == _QCOW2_MAGIC else "raw"
    except OSError as err:
        raise Internal(f"disk layer {image} is unreadable: {err}") from err


async def rebase_overlay(path: Path, backing: Path, backing_format: str = "") -> None:
    """Point a qcow2 layer at `backing` without touching its data (`rebase -u`): a layer pulled
    from another node names that node's backing path. `backing` need not exist yet when its
    format is given."""
    await _qemu_img("rebase", "-u", "-f", "qcow2", "-F", backing_format or _format_of(backing),
                    "-b", str(backing), str(path))


async def _qemu_img(command: str, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "qemu-img", command, *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise Internal(f"qemu-img {command} failed: {err.decode(errors='replace').strip()}")
