"""The VolumeService content calls (E2B's `/volumecontent` routes, through the gateway) over the
Volume API: paths resolved here, one name at a time, as an NFS client would.

WriteFile writes a hidden temp name beside the target, commits it, and renames it over the path,
so readers (over NFS too) see the old file or the new one whole, and a broken stream or a full
volume leaves nothing behind. Listings hide those temp names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import InvalidArgument
from aenv_snapstore import metrics
from aenv_snapstore.volumes.errors import Exists, IsDirectory, NoEntry, NotDirectory, NotEmpty
from aenv_snapstore.volumes.model import Attr, Kind
from aenv_snapstore.volumes.volume import Volume


class StreamIncomplete(InvalidArgument):
    """A WriteFile stream that stopped before its end marker: a broken or cancelled upload."""

log = logging.getLogger(__name__)

# The largest ReadFile message, and the largest write handed to the volume at once.
CHUNK_BYTES = 1 << 20
TEMP_PREFIX = ".aenv-write-"
DIR_MODE = 0o755
FILE_MODE = 0o644
MAX_SYMLINK_HOPS = 8
_READDIR_PAGE = 512

_TYPES = {
    Kind.FILE: (pb.VOLUME_ENTRY_TYPE_FILE, stat.S_IFREG),
    Kind.DIRECTORY: (pb.VOLUME_ENTRY_TYPE_DIRECTORY, stat.S_IFDIR),
    Kind.SYMLINK: (pb.VOLUME_ENTRY_TYPE_SYMLINK, stat.S_IFLNK),
}


def split_path(path: str) -> list[str]:
    """The names of an absolute path ("/" is []); INVALID_ARGUMENT for a relative path, `..`,
    or NUL. Names are checked further (length, characters) by the volume."""
    if not path.startswith("/"):
        raise InvalidArgument(f"path {path!r} is not absolute")
    if "\0" in path:
        raise InvalidArgument("a path must not contain NUL")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidArgument(f"path {path!r} names '..'")
    return parts


def join_path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


async def to_entry(volume: Volume, parts: list[str], attr: Attr) -> pb.VolumeEntry:
    kind, type_bits = _TYPES[attr.kind]
    target = await volume.readlink(attr.ino) if attr.kind is Kind.SYMLINK else ""
    return pb.VolumeEntry(
        name=parts[-1] if parts else "", path=join_path(parts), type=kind, size=attr.size,
        mode=type_bits | (attr.mode & 0o7777), uid=attr.uid, gid=attr.gid,
        atime_ns=attr.atime_ns, mtime_ns=attr.mtime_ns, ctime_ns=attr.ctime_ns, target=target,
    )


async def resolve_dir(volume: Volume, parts: list[str]) -> Attr:
    attr = await volume.resolve(join_path(parts))
    if attr.kind is not Kind.DIRECTORY:
        raise NotDirectory(f"{join_path(parts)} is not a directory")
    return attr


async def children(
    volume: Volume, dir_ino: int, *, hidden: bool = False
) -> AsyncIterator[tuple[str, Attr]]:
    """A directory's entries, page by page; without `hidden`, no WriteFile temp names."""
    cookie = 0
    while True:
        entries, eof = await volume.readdir(dir_ino, cookie, _READDIR_PAGE)
        for entry in entries:
            cookie = entry.cookie
            if entry.name in (".", "..") or (not hidden and entry.name.startswith(TEMP_PREFIX)):
                continue
            yield entry.name, entry.attr
        if eof or not entries:
            return


async def stat_path(volume: Volume, path: str) -> pb.VolumeEntry:
    parts = split_path(path)
    return await to_entry(volume, parts, await volume.resolve(join_path(parts)))


async def list_dir(volume: Volume, path: str, depth: int) -> list[pb.VolumeEntry]:
    """The directory's entries and, `depth` levels down, theirs (depth 0 or 1: its own), each
    directory followed by what is under it."""
    parts = split_path(path)
    top = await resolve_dir(volume, parts)
    levels = max(depth, 1)
    out: list[pb.VolumeEntry] = []
    # Entries still to emit, last first: (names, attr, level). A stack, not recursion: a volume's
    # tree may be deeper than Python's recursion limit.
    pending = [([*parts, n], a, 1) async for n, a in children(volume, top.ino)][::-1]
    while pending:
        names, attr, level = pending.pop()
        out.append(await to_entry(volume, names, attr))
        if attr.kind is Kind.DIRECTORY and level < levels:
            below = [([*names, n], a, level + 1) async for n, a in children(volume, attr.ino)]
            pending.extend(reversed(below))
    return out


@dataclass
class _Made:
    """Directories a call made (parent ino, name), so a failed call can take them back."""

    dirs: list[tuple[int, str]] = field(default_factory=list)

    async def undo(self, volume: Volume) -> None:
        for parent, name in reversed(self.dirs):
            with contextlib.suppress(NoEntry, NotEmpty):
                await volume.rmdir(parent, name)


async def make_dirs(
    volume: Volume, parts: list[str], *, mode: int, uid: int, gid: int, made: _Made
) -> Attr:
    """`mkdir -p`: every missing directory of `parts` (an existing one is fine); NotDirectory if a
    name on the way is something else."""
    attr = await volume.resolve("/")
    for depth, name in enumerate(parts):
        try:
            attr = await volume.lookup(attr.ino, name)
        except NoEntry:
            parent = attr.ino
            try:
                attr = await volume.mkdir(parent, name, mode=mode, uid=uid, gid=gid)
                made.dirs.append((parent, name))
            except Exists:  # made by a concurrent call meanwhile
                attr = await volume.lookup(parent, name)
        if attr.kind is not Kind.DIRECTORY:
            raise NotDirectory(f"{join_path(parts[:depth + 1])} is not a directory")
    return attr


async def make_dir(volume: Volume, request: pb.MakeDirRequest) -> pb.VolumeEntry:
    parts = split_path(request.path)
    mode = (request.mode & 0o7777) if request.HasField("mode") else DIR_MODE
    uid, gid = request.uid, request.gid  # unset: 0
    if request.force:
        attr = await make_dirs(volume, parts, mode=mode, uid=uid, gid=gid, made=_Made())
    elif not parts:
        raise Exists("/ exists")
    else:
        parent = await resolve_dir(volume, parts[:-1])
        attr = await volume.mkdir(parent.ino, parts[-1], mode=mode, uid=uid, gid=gid)
    return await to_entry(volume, parts, attr)


async def update_metadata(volume: Volume, request: pb.UpdateMetadataRequest) -> pb.VolumeEntry:
    parts = split_path(request.path)
    attr = await volume.resolve(join_path(parts))
    if request.HasField("mode") or request.HasField("uid") or request.HasField("gid"):
        attr = await volume.setattr(
            attr.ino,
            mode=(request.mode & 0o7777) if request.HasField("mode") else None,
            uid=request.uid if request.HasField("uid") else None,
            gid=request.gid if request.HasField("gid") else None,
        )
    return await to_entry(volume, parts, attr)


async def remove_path(volume: Volume, path: str) -> None:
    """Removes a file or symlink, or a directory with everything under it."""
    parts = split_path(path)
    if not parts:
        raise InvalidArgument("the volume's root cannot be removed")
    parent = await resolve_dir(volume, parts[:-1])
    attr = await volume.lookup(parent.ino, parts[-1])
    if attr.kind is not Kind.DIRECTORY:
        await volume.remove(parent.ino, parts[-1])
        return
    await _empty_tree(volume, attr.ino)
    await volume.rmdir(parent.ino, parts[-1])


async def _empty_tree(volume: Volume, top: int) -> None:
    """Removes everything under directory `top`, depth first, without recursion. Entries gone
    meanwhile (a concurrent remover) are no error."""
    # (directory ino, its parent ino, its name); the top's own entry is removed by the caller.
    stack: list[tuple[int, int, str]] = [(top, 0, "")]
    while stack:
        ino, parent, name = stack[-1]
        subdir = None
        async for child, attr in children(volume, ino, hidden=True):
            if attr.kind is Kind.DIRECTORY:
                subdir = (attr.ino, ino, child)
                break
            with contextlib.suppress(NoEntry):
                await volume.remove(ino, child)
        if subdir is not None:
            stack.append(subdir)
            continue
        stack.pop()
        if stack:
            with contextlib.suppress(NoEntry):
                await volume.rmdir(parent, name)


async def _follow(volume: Volume, parts: list[str]) -> Attr:
    """The attributes of what `parts` names, symlinks followed (within the volume)."""
    attr = await volume.resolve(join_path(parts))
    for _ in range(MAX_SYMLINK_HOPS):
        if attr.kind is not Kind.SYMLINK:
            return attr
        target = await volume.readlink(attr.ino)
        base = [] if target.startswith("/") else parts[:-1]
        parts = _normalize(base, target)
        attr = await volume.resolve(join_path(parts))
    raise InvalidArgument(f"{join_path(parts)}: too many levels of symbolic links")


def _normalize(base: list[str], target: str) -> list[str]:
    out = list(base)
    for name in target.split("/"):
        if name == "..":
            if out:
                out.pop()
        elif name not in ("", "."):
            out.append(name)
    return out


async def read_file(volume: Volume, path: str) -> AsyncIterator[bytes]:
    """The file's content in messages of at most 1 MiB, read from the volume as they are sent."""
    attr = await _follow(volume, split_path(path))
    if attr.kind is Kind.DIRECTORY:
        raise IsDirectory(f"{path} is a directory")
    offset = 0
    while True:
        data, eof = await volume.read(attr.ino, offset, CHUNK_BYTES)
        if data:
            metrics.VOLUME_BYTES_READ.labels("api").inc(len(data))
            offset += len(data)
            yield data
        if eof or not data:
            return


async def write_file(
    volume: Volume, header: pb.WriteFileHeader, content: AsyncIterator[pb.WriteFileRequest],
) -> pb.VolumeEntry:
    """Replaces (or creates) the file with the stream's content, atomically: a temp name beside
    it, committed, renamed over it, committed. Any failure (a stream without its end marker,
    the quota) removes the temp name and the directories this call made. The end marker is
    what tells a whole upload from a cancelled one: grpc.aio ends both streams the same way."""
    parts = split_path(header.path)
    if not parts:
        raise IsDirectory("/ is a directory")
    name = parts[-1]
    temp = TEMP_PREFIX + secrets.token_hex(8)
    made = _Made()
    parent_ino: int | None = None
    try:
        if header.force:
            parent = await make_dirs(volume, parts[:-1], mode=DIR_MODE, uid=header.uid,
                                     gid=header.gid, made=made)
        else:
            parent = await resolve_dir(volume, parts[:-1])
        existing = await _lookup(volume, parent.ino, name)
        if existing is not None and existing.kind is Kind.DIRECTORY:
            raise IsDirectory(f"{join_path(parts)} is a directory")
        mode, uid, gid = _new_owner(header, existing)
        created = await volume.create(parent.ino, temp, mode=mode, uid=uid, gid=gid,
                                      exclusive=True)
        parent_ino = parent.ino
        await _copy_in(volume, created.ino, content)
        await volume.commit()
        await volume.rename(parent.ino, temp, parent.ino, name)
        parent_ino = None
        await volume.commit()
        return await to_entry(volume, parts, await volume.lookup(parent.ino, name))
    except BaseException:
        try:
            await asyncio.shield(_discard(volume, parent_ino, temp, made))
        except Exception:  # the write's own failure is the one to report
            log.exception("could not discard a failed write's temp file",
                          extra={"volume_id": volume.volume_id})
        raise


def _new_owner(header: pb.WriteFileHeader, existing: Attr | None) -> tuple[int, int, int]:
    """Mode, uid and gid of the new file: the header's, else the replaced file's, else defaults."""
    mode = existing.mode if existing is not None else FILE_MODE
    uid = existing.uid if existing is not None else 0
    gid = existing.gid if existing is not None else 0
    return (
        (header.mode & 0o7777) if header.HasField("mode") else mode,
        header.uid if header.HasField("uid") else uid,
        header.gid if header.HasField("gid") else gid,
    )


async def _lookup(volume: Volume, dir_ino: int, name: str) -> Attr | None:
    try:
        return await volume.lookup(dir_ino, name)
    except NoEntry:
        return None


async def _copy_in(
    volume: Volume, ino: int, content: AsyncIterator[pb.WriteFileRequest]
) -> None:
    offset = 0
    async for request in content:
        if request.HasField("header"):
            raise InvalidArgument("only the first WriteFile message is a header")
        if request.HasField("end"):
            if await anext(content, None) is not None:
                raise InvalidArgument("the WriteFile end marker must be the last message")
            return
        data = request.data
        for start in range(0, len(data), CHUNK_BYTES):
            piece = data[start:start + CHUNK_BYTES]
            await volume.write(ino, offset, piece)
            offset += len(piece)
            metrics.VOLUME_BYTES_WRITTEN.labels("api").inc(len(piece))
    raise StreamIncomplete("the WriteFile stream ended before its end marker")


async def _discard(volume: Volume, parent_ino: int | None, temp: str, made: _Made) -> None:
    if parent_ino is not None:
        with contextlib.suppress(NoEntry):
            await volume.remove(parent_ino, temp)
    await made.undo(volume)
