"""Bounding what template builds leave on a node's disk, as cache.py bounds the captured
templates: the image layer blobs (`images/blobs/`), the images' base disks (`images/bases/`),
the step layers (`templates/layers/`) and the rootfs files of templates pulled from snapstore
(`templates/rootfs/`). Past each one's configured size, the least recently used go first (use
times are file mtimes, so they survive restarts: a blob's or a base disk's is touched when a
build reuses it, a step layer's when a build boots on it, a pulled rootfs's when a pull finds it
here).

Never removed: anything used in the last `min_idle_s` (a build may have it in hand: blobs are
read after the pull that found them, a layer is the backing of a build VM's disk), a base disk
or pulled rootfs a registered template's rootfs is, and a step layer, base disk or pulled rootfs
on the disk chain of a captured template (whose sandboxes, paused sandboxes and snapshots stand
on it in turn) or of another step layer. What goes is fetched or made again by the next build or
pull that needs it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.artifacts.digest import SUFFIX as DIGEST_SUFFIX
from aenv_nodeagent.images.rootfs import BASE_DISK_NAME
from aenv_nodeagent.templates.model import PULLED_ROOTFS_DIR, TemplateInputs, TemplateSnapshot

log = logging.getLogger(__name__)

_QCOW2_MAGIC = b"QFI\xfb"


def backing_of(image: Path) -> Path | None:
    """The backing file a qcow2 image's header names (relative names: to its folder)."""
    try:
        with image.open("rb") as f:
            header = f.read(20)
            if len(header) < 20 or header[:4] != _QCOW2_MAGIC:
                return None
            offset, size = struct.unpack(">QI", header[8:20])
            if not offset or not size:
                return None
            f.seek(offset)
            name = f.read(size).decode()
    except (OSError, UnicodeDecodeError):
        return None
    path = Path(name)
    return path if path.is_absolute() else image.parent / path


def chain_of(disk: Path) -> list[Path]:
    """The disk and every image below it, nearest first."""
    chain: list[Path] = []
    current: Path | None = disk
    while current is not None and current not in chain and len(chain) < 256:
        chain.append(current)
        current = backing_of(current)
    return chain


def disk_bytes(directory: Path) -> int:
    """What the folder takes on disk (sparse RAM files count what they hold)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # removed meanwhile
    return total


def mark_used(path: Path) -> None:
    """Its use time, for the least-recently-used order."""
    try:
        os.utime(path)
    except OSError:
        pass  # removed meanwhile: the caller finds out on its own


@dataclass(frozen=True)
class Entry:
    """One thing that goes as a whole: a file, or a folder."""

    path: Path
    bytes: int
    last_used: float


class Bounded:
    """One kind of thing kept under `max_bytes`: `entries` lists them, `kept` says which are in
    use, `remove` removes one."""

    def __init__(
        self,
        name: str,
        max_bytes: int,
        entries: Callable[[], list[Entry]],
        kept: Callable[[], set[Path]],
        remove: Callable[[Path], None],
        *,
        min_idle_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._max_bytes = max_bytes
        self._entries = entries
        self._kept = kept
        self._remove = remove
        self._min_idle_s = min_idle_s
        self._clock = clock

    def trim(self) -> list[Path]:
        """Removes the least recently used until the rest fits; returns what went."""
        entries = sorted(self._entries(), key=lambda e: e.last_used)
        total = sum(e.bytes for e in entries)
        if total <= self._max_bytes:
            return []
        kept, recent = self._kept(), self._clock() - self._min_idle_s
        removed = []
        for entry in entries:
            if total <= self._max_bytes:
                break
            if entry.path in kept or entry.last_used > recent:
                continue
            self._remove(entry.path)
            total -= entry.bytes
            removed.append(entry.path)
        if removed:
            log.info("build cache trimmed", extra={
                "cache": self.name, "removed": len(removed), "cache_mib": total >> 20})
        return removed


def files_in(folder: Path, pattern: str) -> list[Entry]:
    found = []
    for path in folder.glob(pattern):
        try:
            stat = path.stat()
        except OSError:
            continue
        found.append(Entry(path, stat.st_blocks * 512, stat.st_mtime))
    return found


def folders_in(folder: Path, used_by: str) -> list[Entry]:
    """Each folder of `folder` (not hidden: work in progress), used as `used_by` in it was."""
    found = []
    for path in folder.glob("[!.]*"):
        try:
            used = (path / used_by).stat().st_mtime
        except OSError:
            continue
        found.append(Entry(path, disk_bytes(path), used))
    return found


def remove_layer(layer: Path) -> None:
    """A step layer's file, and its key's index when that names it."""
    index = layer.parent / f"{layer.name.rsplit('-', 1)[0]}.json"
    try:
        if layer.name in index.read_text():
            index.unlink()
    except OSError:
        pass
    layer.unlink(missing_ok=True)


def remove_folder(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def remove_file(path: Path) -> None:
    path.unlink(missing_ok=True)


def pulled_rootfs_in(folder: Path) -> list[Entry]:
    """The pulled rootfs files, without the digests kept beside them (artifacts/digest.py)."""
    return [entry for entry in files_in(folder, "[!.]*")
            if not entry.path.name.endswith(DIGEST_SUFFIX)]


def remove_pulled_rootfs(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(path.name + DIGEST_SUFFIX).unlink(missing_ok=True)


class Templates(Protocol):
    """What the bounds read of the node's templates (TemplateStore)."""

    def registered(self) -> list[str]: ...
    def inputs(self, template_id: str) -> TemplateInputs: ...
    def on_disk(self) -> list[TemplateSnapshot]: ...


@dataclass(frozen=True)
class BuildCacheSizes:
    blobs_bytes: int
    bases_bytes: int
    layers_bytes: int
    pulled_rootfs_bytes: int


def build_cache_bounds(
    templates: Templates, images: Path, templates_dir: Path, sizes: BuildCacheSizes
) -> list[Bounded]:
    """The node's four bounds: `images` is the image cache folder (blobs and base disks),
    `templates_dir` the templates' (step layers, pulled rootfs files)."""
    blobs, bases = images / "blobs" / "sha256", images / "bases"
    layers, pulled = templates_dir / "layers", templates_dir / PULLED_ROOTFS_DIR

    def below() -> set[Path]:
        # Under a captured template, or under another layer: a layer is removed only once
        # nothing stands on it (a later pass takes its parent), and a base disk only once no
        # layer does (one made again from the same image is not the same bytes).
        tops = [snap.disk for snap in templates.on_disk()] + list(layers.glob("*.qcow2"))
        return {image for top in tops for image in chain_of(top)[1:]}

    def registered() -> set[Path]:
        return {templates.inputs(t).rootfs.path for t in templates.registered()}

    def used_bases() -> set[Path]:
        return {path.parent for path in registered() | below() if path.parent.parent == bases}

    def used_pulled() -> set[Path]:
        return {path for path in registered() | below() if path.parent == pulled}

    def used_layers() -> set[Path]:
        return {path for path in below() if path.parent == layers}

    return [
        Bounded("image blobs", sizes.blobs_bytes, lambda: files_in(blobs, "*"), set,
                remove_file),
        Bounded("image base disks", sizes.bases_bytes,
                lambda: folders_in(bases, BASE_DISK_NAME), used_bases, remove_folder),
        Bounded("step layers", sizes.layers_bytes, lambda: files_in(layers, "*.qcow2"),
                used_layers, remove_layer),
        Bounded("pulled rootfs", sizes.pulled_rootfs_bytes, lambda: pulled_rootfs_in(pulled),
                used_pulled, remove_pulled_rootfs),
    ]


async def run_every(interval_s: float, what: str, work: Callable[[], Awaitable[object]]) -> None:
    """`work` now and every `interval_s` after, for good: one failed pass is logged, and the next
    tries again (etcd away, a file removed meanwhile)."""
    while True:
        try:
            await work()
        except Exception:
            log.exception("periodic pass failed", extra={"what": what})
        await asyncio.sleep(interval_s)


async def run_bounds(bounds: list[Bounded], interval_s: float) -> None:
    async def trim() -> None:
        for bound in bounds:  # in the loop: `kept` reads what the node holds
            bound.trim()

    await run_every(interval_s, "build cache trim", trim)
