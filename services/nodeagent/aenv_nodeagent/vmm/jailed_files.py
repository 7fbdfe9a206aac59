"""The files of a jailed VM: which paths its root binds (read-only unless only it writes them),
which it owns, and where a host path is inside its root for the paths QMP names later."""

from __future__ import annotations

import contextlib
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.errors import VmmError, VmStartError
from aenv_nodeagent.vmm.preload import preloaded
from aenv_nodeagent.vmm.spec import VmSpec

_QCOW2_MAGIC = b"QFI\xfb"
_CHAIN_MAX = 256  # deeper than any layer chain a sandbox keeps; ends a loop


@dataclass(frozen=True)
class Binds:
    writable: list[Path]
    readonly: list[Path]


def backing_chain(image: Path) -> list[Path]:
    """The files under a qcow2 image, nearest first, as its headers name them (QEMU opens
    them by these names)."""
    chain: list[Path] = []
    while len(chain) < _CHAIN_MAX:
        with image.open("rb") as fh:
            header = fh.read(20)
            if header[:4] != _QCOW2_MAGIC:
                break
            offset, size = struct.unpack(">QI", header[8:20])
            if offset == 0:
                break
            fh.seek(offset)
            name = fh.read(size).decode()
        if name.startswith("json:"):
            raise VmStartError(
                f"{image} names its backing file by options, which a jail cannot bind")
        image = image.parent / name  # a relative name is relative to the image's directory
        chain.append(image)
    return chain


def binds(spec: VmSpec, workdir: Path, files: VmFiles, console_log: Path | None) -> Binds:
    """The VM's directory (`workdir`'s parent: its disk, console, overlays and state files) is
    bound writable, as is the QMP socket's directory; shared files (kernel, template disks and
    layers, a memory image mapped copy-on-write) read-only, so no VM can write what another
    reads."""
    own = workdir.parent
    writable = []
    if not files.qmp_socket.is_relative_to(own):
        writable.append(files.qmp_socket.parent)
    if console_log is not None and not console_log.is_relative_to(own):
        writable.append(console_log)
    readonly = [spec.boot_kernel, spec.initrd]
    if spec.preload_library is not None:
        readonly += preloaded(spec.preload_library)
    for disk in spec.disks:
        (readonly if disk.readonly else writable).append(disk.path)
        if disk.format == "qcow2":
            readonly += backing_chain(disk.path)
    (writable if spec.mem_shared else readonly).append(spec.mem_path)
    writable = _outside(writable, own)
    return Binds(writable, [path for path in _outside(readonly, own) if path not in writable])


def _outside(paths: list[Path], own: Path) -> list[Path]:
    """`own`, then `paths` not under it, each once."""
    kept = [own]
    for path in paths:
        if not path.is_relative_to(own) and path not in kept:
            kept.append(path)
    return kept


def hand_over(spec: VmSpec, workdir: Path, console_log: Path | None, uid: int) -> None:
    """Give `uid` what its QEMU creates or writes: its work directory (pidfile, QMP socket), its
    console log, its writable disks, and a memory file it maps shared (its own RAM); and a way
    into its directory (root's, often 0700): its group, which may only pass through."""
    own = workdir.parent
    os.chown(own, -1, uid)
    os.chmod(own, own.stat().st_mode & 0o7777 | 0o010)
    workdir.mkdir(parents=True, exist_ok=True)
    os.chown(workdir, uid, uid)
    socket_dir = VmFiles.in_dir(workdir).qmp_socket.parent
    if socket_dir != workdir:  # a deep workdir's socket lives in a directory of its own
        socket_dir.mkdir(parents=True, exist_ok=True)
        os.chown(socket_dir, uid, uid)
    if console_log is not None:
        console_log.touch()
        os.chown(console_log, uid, uid)
    for disk in spec.disks:
        if not disk.readonly:
            os.chown(disk.path, uid, uid)
    if spec.mem_shared:
        spec.mem_path.touch()  # QEMU sizes it; made here so the jail can bind it
        os.chown(spec.mem_path, uid, uid)


def let_read(shared: list[Path]) -> None:
    """Make the shared files a jail binds read-only readable by its uid, whoever made them
    (layers pulled from snapstore are 0600): readable by others. No other user reaches them
    through the node's directories (root's, 0700); a jail sees only those bound into it."""
    for path in shared:
        mode = path.stat().st_mode
        if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
            os.chmod(path, stat.S_IMODE(mode) | stat.S_IROTH)


def _mount_points(pid: int) -> Iterator[str]:
    with open(f"/proc/{pid}/mountinfo") as info:
        for line in info:
            # Field 5 is the mount point as the process sees it, spaces and such octal-escaped.
            yield line.split()[4].encode().decode("unicode_escape")


def inside(pid: int, path: Path) -> Path:
    """Where `path` (a host path) is in the jailed process `pid`'s root: under a directory bound
    there, found by its inode, as a directory renamed on the host since keeps its jail path.

    :raise VmmError: the jail does not hold it."""
    bound: dict[tuple[int, int], str] = {}
    with contextlib.suppress(OSError):
        for point in _mount_points(pid):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{pid}/root{point}")
                bound.setdefault((st.st_dev, st.st_ino), point)
    for ancestor in [path, *path.parents]:
        with contextlib.suppress(OSError):
            st = os.stat(ancestor)
            found = bound.get((st.st_dev, st.st_ino))
            if found is not None and found != "/":
                return Path(found) / path.relative_to(ancestor)
    raise VmmError(f"{path} is not in the jail of QEMU {pid}")
