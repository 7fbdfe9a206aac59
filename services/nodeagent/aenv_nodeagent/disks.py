"""qcow2 layers: a sandbox writes only to its private overlay over a read-only backing chain."""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
from pathlib import Path

from aenv_common.errors import Internal

_QCOW2_MAGIC = b"QFI\xfb"


async def create_overlay(backing: Path, path: Path, *, like: Path | None = None) -> None:
    """A new empty qcow2 layer at `path` whose reads fall through to `backing` (which may not
    exist yet when it is to be a link to `like`).

    The size is read from the backing's header, so qemu-img never opens the backing: it may be
    held by a running QEMU (whose write lock would refuse even a read-only open). qemu-img makes
    the same bytes for every overlay of a size but the backing's name, so it runs once per size
    and format; each overlay is that template with its backing named (in microseconds, where a
    qemu-img process takes about 15 ms: it is on the path of every restore and capture)."""
    overlay = await _overlay_bytes(backing, like or backing)
    try:
        path.write_bytes(overlay)
    except OSError as err:
        raise Internal(f"cannot write disk layer {path}: {err}") from err


async def rename_backing(overlay: Path, backing: Path) -> None:
    """Make `overlay`, an empty layer `create_overlay` made over another disk of `backing`'s
    size and format and never written since, stand on `backing`: rewritten in place (the same
    file, open in a QEMU that has not read it yet) as `create_overlay` would make it now.

    :raise Internal: `overlay` is not such a layer, or it cannot be written."""
    new = await _overlay_bytes(backing, backing)
    try:
        fd = os.open(overlay, os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_size != len(new) or qcow2_virtual_size(overlay) != (
                    qcow2_virtual_size(backing)):
                raise Internal(f"{overlay} is not an empty layer of {backing}'s size")
            os.pwrite(fd, new, 0)
        finally:
            os.close(fd)
    except OSError as err:
        raise Internal(f"cannot write disk layer {overlay}: {err}") from err


async def _overlay_bytes(backing: Path, source: Path) -> bytes:
    """An empty qcow2 overlay naming `backing`, of `source`'s size and format."""
    backing_format = _format_of(source)
    size = qcow2_virtual_size(source) if backing_format == "qcow2" else source.stat().st_size
    template = _overlay_templates.get((size, backing_format))
    if template is None:
        template = await _overlay_template(size, backing_format)
        _overlay_templates[(size, backing_format)] = template
    return _naming(template, backing)


_overlay_templates: dict[tuple[int, str], bytes] = {}  # (virtual size, backing format)


async def _overlay_template(size: int, backing_format: str) -> bytes:
    with tempfile.TemporaryDirectory() as scratch:
        template = Path(scratch) / "overlay.qcow2"
        await _qemu_img("create", "-q", "-f", "qcow2", "-F", backing_format, "-b", "/", "-u",
                        str(template), str(size))
        return template.read_bytes()


def _naming(template: bytes, backing: Path) -> bytes:
    """`template`, a qcow2 overlay, with its backing file name (in its first cluster, after
    the header and its extensions, nothing behind it) replaced by `backing`."""
    offset, length = struct.unpack(">QI", template[8:20])
    cluster_size = 1 << struct.unpack(">I", template[20:24])[0]
    name = str(backing).encode()
    if offset + max(length, len(name)) > cluster_size or template[
            offset + length:cluster_size].strip(b"\0"):
        raise Internal(f"backing path {backing} does not fit a qcow2 header")
    overlay = bytearray(template)
    overlay[16:20] = struct.pack(">I", len(name))
    overlay[offset:offset + max(length, len(name))] = name.ljust(length, b"\0")
    return bytes(overlay)


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


async def flatten_onto(image: Path, base: Path, dest: Path) -> None:
    """A copy of `image` standing on `base` alone: the layers between them merged into it (a
    template's disk on its step layers, to hand to a node that has only the rootfs). Running
    QEMUs may read the chain meanwhile (`-U`)."""
    await _qemu_img("convert", "-U", "-f", "qcow2", "-O", "qcow2", "-B", str(base),
                    "-F", _format_of(base), str(image), str(dest))


async def _qemu_img(command: str, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "qemu-img", command, *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise Internal(f"qemu-img {command} failed: {err.decode(errors='replace').strip()}")
