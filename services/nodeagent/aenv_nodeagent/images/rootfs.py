"""An image source turned into the read-only qcow2 base disk a template boots from.

    pull     the source's config and layers, the blobs into the layer cache (sources.py)
    unpack   the layers applied in order into a directory (unpack.py), then the guest's
             /etc/hosts, /etc/hostname and /etc/resolv.conf on top (guest_files.py)
    ext4     `mkfs.ext4 -d` of that directory, at the requested disk size
    qcow2    `qemu-img convert` of the raw ext4, made read-only

`mkfs.ext4 -d` copies owners, modes, timestamps, xattrs, hard links and device nodes from the
tree, so no loop mount and no kernel involvement is needed. The filesystem spans the whole disk
(the guest sees `disk_mib`; the raw file is sparse, and qemu-img stores no zero clusters), with
4 KiB blocks, 256-byte inodes and no reserved blocks whatever the size (mke2fs would pick 1 KiB
blocks and 128-byte inodes for small disks), and enough inodes for the image's files.

Everything is built in a private temporary directory inside `out_dir` (mode 0700: the unpacked
tree holds the image's setuid binaries and device nodes) that is removed whatever happens, after
the last phase (its removal is in no phase's time); only the finished qcow2 is renamed into
place.
"""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aenv_common.errors import Internal
from aenv_nodeagent.artifacts.cache import remove_build_dir
from aenv_nodeagent.artifacts.proc import run
from aenv_nodeagent.network.namespaces import run_in_fresh_thread
from aenv_nodeagent.phases import PhaseTimer

from .blobs import BlobCache
from .errors import RootfsTooLarge
from .guest_files import add_guest_files
from .sources import ImageSource, PulledImage
from .unpack import UnpackStats, unpack_image

MIB = 1 << 20
BLOCK = 4096
INODE_SIZE = 256
BYTES_PER_INODE = 16384  # mke2fs's default ratio; more inodes if the image has more files
BASE_DISK_NAME = "rootfs.qcow2"
LABEL = "aenv-root"
# mkfs.ext4 -d on a full disk says one of these (e2fsprogs 1.47).
_FULL_MESSAGES = ("Could not allocate block", "No space left on device", "Could not allocate inode")


@dataclass(frozen=True)
class BaseDisk:
    path: Path  # the read-only qcow2
    image: str  # the source's name
    digest: str  # the image's manifest (or config) digest
    config: dict[str, Any]  # the image config: Env, Cmd, Entrypoint, WorkingDir, User, ...
    disk_mib: int
    content_mib: int  # what the files take (at most), rounded up
    unpacked: UnpackStats
    downloaded_blobs: int
    cached_blobs: int
    phases_ms: dict[str, float] = field(default_factory=dict)  # pull, unpack, ext4, qcow2


@dataclass(frozen=True)
class DiskSize:
    """How large the base disk is: `disk_mib`, or — given `min_free_mib` — as large as the
    content needs plus that much free room (never below `disk_mib`, never past `max_mib`)."""

    disk_mib: int
    min_free_mib: int | None = None
    max_mib: int | None = None

    def for_content(self, content: int, inodes: int) -> tuple[int, int]:
        """(disk MiB, MiB the files need on it)."""
        size = self.disk_mib
        if self.min_free_mib is not None:
            for _ in range(3):  # the filesystem's own overhead grows with its size
                wanted = filesystem_mib(content, inodes, size) + self.min_free_mib
                if wanted <= size:
                    break
                size = -(-wanted // GROW_STEP_MIB) * GROW_STEP_MIB
        return size, filesystem_mib(content, inodes, size)


async def build_base_disk(
    source: ImageSource, cache: BlobCache, out_dir: Path, size: int | DiskSize
) -> BaseDisk:
    """Pull `source` and make `out_dir/rootfs.qcow2` from it, of `size` MiB (or as `DiskSize`
    says).

    :raise RootfsTooLarge: the files do not fit (or would need more than `max_mib`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".image-build-", dir=out_dir))  # 0700
    try:
        return await _build(source, cache, out_dir, work,
                            size if isinstance(size, DiskSize) else DiskSize(size))
    finally:
        await asyncio.to_thread(remove_build_dir, work)


async def _build(
    source: ImageSource, cache: BlobCache, out_dir: Path, work: Path, size: DiskSize
) -> BaseDisk:
    disk_mib = size.disk_mib
    timer = PhaseTimer(span_prefix="image")
    tree, raw, qcow2 = work / "rootfs", work / "rootfs.ext4", work / BASE_DISK_NAME
    image = await timer.timed("pull", source.pull(cache))
    with timer.phase("unpack"):
        tree.mkdir(mode=0o755)
        # A cancelled build waits for the thread, so cleanup never races its writes.
        unpacked = await run_in_fresh_thread(partial(_unpack, tree, image), "image-unpack")
    with timer.phase("ext4"):
        # What the layers wrote bounds what is left after their whiteouts: when that fits, the
        # tree need not be walked (tens of thousands of lstat calls on a large image).
        content = unpacked.bytes + unpacked.entries * BLOCK
        inodes = unpacked.entries + 1
        if size.for_content(content, inodes)[0] != disk_mib or \
                filesystem_mib(content, inodes, disk_mib) > disk_mib:
            content, inodes = await run_in_fresh_thread(partial(measure_tree, tree),
                                                        "image-measure")
        disk_mib, needed_mib = size.for_content(content, inodes)
        if size.max_mib is not None and needed_mib <= size.max_mib < disk_mib:
            raise RootfsTooLarge(source.name, disk_mib, size.max_mib, limit=True)
        if needed_mib > disk_mib or (size.max_mib is not None and disk_mib > size.max_mib):
            raise RootfsTooLarge(source.name, needed_mib, min(disk_mib, size.max_mib or disk_mib))
        await make_ext4(tree, raw, disk_mib, inodes, source.name)
    with timer.phase("qcow2"):
        await run(["qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, qcow2])
        qcow2.chmod(0o444)  # shared by every sandbox's overlay: never written
        final = out_dir / BASE_DISK_NAME
        os.rename(qcow2, final)
    return BaseDisk(final, source.name, image.digest, image.config.raw, disk_mib,
                    -(-content // MIB),
                    unpacked, image.downloaded, image.cached, dict(timer.phases_ms))


def _unpack(tree: Path, image: PulledImage) -> UnpackStats:
    """The image's layers, then the files E2B's builder adds to every image (guest_files.py)."""
    stats = unpack_image(tree, image)
    add_guest_files(tree, stats, image.name)
    return stats


# A grown disk is a multiple of this.
GROW_STEP_MIB = 256


def measure_tree(tree: Path) -> tuple[int, int]:
    """(bytes the files' blocks take, inodes needed) of an unpacked tree; hard links once."""
    seen: set[int] = set()
    blocks, inodes = 0, 1
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if st.st_ino in seen:
                    continue
                seen.add(st.st_ino)
            inodes += 1
            if stat.S_ISREG(st.st_mode):
                blocks += -(-st.st_size // BLOCK)
            elif stat.S_ISDIR(st.st_mode) or (stat.S_ISLNK(st.st_mode) and st.st_size > 59):
                blocks += 1  # a directory's first block; a symlink too long for its inode
    return blocks * BLOCK, inodes


def inode_count(inodes: int, disk_mib: int) -> int:
    """mke2fs's default count, or more when the image has more files (with room to grow)."""
    return max(disk_mib * MIB // BYTES_PER_INODE, inodes + inodes // 4 + 4096)


def filesystem_mib(content: int, inodes: int, disk_mib: int) -> int:
    """A safe estimate of the disk an ext4 of this content needs: data plus extent blocks,
    inode tables, the journal mke2fs picks for this size, bitmaps and group descriptors."""
    tables = inode_count(inodes, disk_mib) * INODE_SIZE
    journal = _journal_bytes(disk_mib * MIB // BLOCK)
    overhead = disk_mib * MIB // 100  # bitmaps, descriptors, reserved GDT blocks, with slack
    return -(-(content + content // 50 + tables + journal + overhead) // MIB)


def _journal_bytes(blocks: int) -> int:
    # ext2fs_default_journal_size (e2fsprogs 1.47), in 4 KiB blocks.
    for limit, size in ((32768, 1024), (256 * 1024, 4096), (512 * 1024, 8192),
                        (4096 * 1024, 16384), (8192 * 1024, 32768), (16384 * 1024, 65536),
                        (32768 * 1024, 131072)):
        if blocks < limit:
            return size * BLOCK
    return 262144 * BLOCK


async def make_ext4(tree: Path, raw: Path, disk_mib: int, inodes: int, image: str) -> None:
    try:
        await run([
            "mkfs.ext4", "-q", "-F", "-L", LABEL, "-b", str(BLOCK), "-I", str(INODE_SIZE),
            "-m", "0", "-N", str(inode_count(inodes, disk_mib)), "-E", "root_owner=0:0",
            "-d", tree, raw, f"{disk_mib}M",
        ])
    except Internal as err:
        if any(text in err.message for text in _FULL_MESSAGES):
            raise RootfsTooLarge(image, -(-raw.stat().st_size // MIB) + 1, disk_mib) from None
        raise
