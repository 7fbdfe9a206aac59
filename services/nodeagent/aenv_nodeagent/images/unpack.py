"""Layers applied in order into one directory, as the container runtime's union would show them.

Each layer is a tar (plain, gzip or zstd: told apart by their magic bytes, whatever the media type
says) of what changed: files added or replaced, plus *whiteouts*, empty entries that delete what
lower layers had:

    etc/.wh.motd         etc/motd (file or whole directory) is gone
    var/cache/.wh..wh..opq   var/cache is opaque: what lower layers had in it is gone, what this
                             layer puts there stays

The tar is untrusted input and this runs as root on the host, so entries are never written with
tarfile's `extract`, which trusts names and links. Instead every path is resolved by hand, inside
the root, one component at a time (`_Tree.parent`):

- a name with `..` is refused; a leading `/` is dropped (tar tools write both kinds);
- a symlink met on the way is interpreted as the guest would see it, relative to the root: an
  absolute target restarts at the root and `..` stops at it, so `evil -> /` then `evil/etc/x`
  writes the root's own `etc/x`, never the host's (as containerd and umoci do);
- the entry's own name is never followed: whatever is there is removed and the entry created
  with O_NOFOLLOW | O_EXCL;
- a hard link must name something already in the tree, resolved the same way.

Owners are numeric (the image's uids, not the host's names), modes keep setuid/setgid/sticky, and
PAX `SCHILY.xattr.*` headers become extended attributes (`security.capability` makes `ping` work
without setuid), set last because chown clears capabilities. Directories get their mtimes when
the layer is done (creating their children bumps them). Each layer is hashed as it is read, both
as stored (its blob digest) and uncompressed (its config's diff_id), and refused on mismatch.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import shutil
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import zstandard

from aenv_common.errors import Internal

from .blobs import HashingReader, Readable
from .errors import LayerCorrupt, UnsupportedImage
from .sources import Layer, PulledImage

log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_XATTR_PREFIX = "SCHILY.xattr."
_MAX_SYMLINKS = 40  # as Linux's path walk
_COPY_CHUNK = 1 << 20


@dataclass
class UnpackStats:
    layers: int = 0
    entries: int = 0
    files: int = 0
    bytes: int = 0  # of regular files' contents


def unpack_image(root: Path, image: PulledImage) -> UnpackStats:
    """Apply every layer of `image` into `root` (an empty directory); blocking."""
    stats = UnpackStats()
    for layer in image.layers:
        stream = image.open_layer(layer)
        try:
            apply_layer(root, stream, layer, stats, image.name)
        except LayerCorrupt:
            image.on_corrupt(layer)
            raise
        except OSError as err:  # the host's side: disk full, a filesystem without xattrs, ...
            raise Internal(f"unpacking {image.name} failed: {err}") from None
        finally:
            stream.close()
    return stats


def apply_layer(
    root: Path, blob: Readable, layer: Layer, stats: UnpackStats, image: str = "image"
) -> None:
    """Apply one layer's blob to `root`, verifying it against `layer`'s digests."""
    name = layer.digest or layer.diff_id
    stored = HashingReader(blob)
    plain = HashingReader(_decompressed(stored))
    tree = _Tree(str(root), image, name)
    try:
        with tarfile.open(fileobj=plain, mode="r|") as archive:  # type: ignore[call-overload]
            for member in archive:
                tree.apply(member, archive, stats)
        plain.drain()
        stored.drain()
    except (tarfile.TarError, EOFError, zlib.error, zstandard.ZstdError, gzip.BadGzipFile
            ) as err:
        raise LayerCorrupt(name, f"not a valid layer archive ({type(err).__name__}: {err})"
                           ) from None
    plain.verify(layer.diff_id, what="uncompressed layer")
    if layer.digest is not None:
        stored.verify(layer.digest, layer.size)
    tree.finish()
    stats.layers += 1


def _decompressed(stream: HashingReader) -> Readable:
    head = stream.read(4)
    joined = _Prefixed(head, stream)
    as_file = cast(IO[bytes], joined)  # both decompressors only call read()
    if head.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=as_file, mode="rb")
    if head == _ZSTD_MAGIC:
        reader: Readable = zstandard.ZstdDecompressor().stream_reader(
            as_file, read_across_frames=True)
        return reader
    return joined


class _Prefixed:
    """`head` (already read to sniff the magic) followed by the rest of `stream`."""

    def __init__(self, head: bytes, stream: Readable) -> None:
        self._head, self._stream = head, stream

    def read(self, n: int = -1, /) -> bytes:
        if not self._head:
            return self._stream.read(n)
        if n < 0:
            data, self._head = self._head + self._stream.read(), b""
            return data
        data, self._head = self._head[:n], self._head[n:]
        return data if len(data) == n else data + self._stream.read(n - len(data))




class _Tree:
    """The root being written, and what the current layer created in it (for opaque dirs)."""

    def __init__(self, root: str, image: str, layer: str) -> None:
        self.root, self.image, self.layer = root, image, layer
        self._created: set[str] = set()  # host paths this layer made
        self._dir_times: list[tuple[str, int]] = []
        self._parents: dict[tuple[str, ...], str] = {}  # resolved parent dirs, this layer

    def _refused(self, detail: str) -> UnsupportedImage:
        return UnsupportedImage(self.image, f"layer {self.layer[:19]}…: {detail}")

    # ---- paths ---------------------------------------------------------------------------

    def _clean(self, name: str) -> list[str]:
        """The components of an entry name; `..` is refused, `/` and `.` prefixes dropped."""
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self._refused(f"entry {name[:200]!r} points outside the root")
        return parts

    def parent(self, parts: list[str], create: bool) -> str | None:
        """The host path of the directory holding `parts[-1]`, every step a real directory
        inside the root (missing ones made when `create`); None when absent and not `create`."""
        key = tuple(parts[:-1])
        if key in self._parents:
            return self._parents[key]
        resolved: list[str] = []
        pending = list(reversed(parts[:-1]))
        links = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()  # never above the root
                continue
            path = os.path.join(self.root, *resolved, part)
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                if not create:
                    return None
                os.mkdir(path, 0o755)
                self._created.add(path)
                mode = stat.S_IFDIR
            if stat.S_ISLNK(mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    raise self._refused(f"symlink loop under {'/'.join(parts)!r}")
                target = os.readlink(path)
                if target.startswith("/"):
                    resolved = []
                pending.extend(reversed(target.split("/")))
                continue
            if not stat.S_ISDIR(mode):
                if not create:
                    return None
                self._remove(path)  # a later layer's directory replaces a lower file
                os.mkdir(path, 0o755)
            resolved.append(part)
        found = os.path.join(self.root, *resolved)
        self._parents[key] = found
        return found

    def _remove(self, path: str) -> None:
        """Delete whatever is at `path` without following it."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISDIR(mode):
            shutil.rmtree(path)  # rmtree never follows symlinks inside
        else:
            os.unlink(path)
        if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            self._parents.clear()  # resolutions through it are stale

    # ---- entries -------------------------------------------------------------------------

    def apply(self, member: tarfile.TarInfo, archive: tarfile.TarFile, stats: UnpackStats) -> None:
        stats.entries += 1
        parts = self._clean(member.name)
        if not parts:  # the root itself ("./")
            if member.isdir():
                self._metadata(self.root, member)
            return
        base = parts[-1]
        if base.startswith(_WHITEOUT):
            self._whiteout(parts)
            return
        parent = self.parent(parts, create=True)
        assert parent is not None
        path = os.path.join(parent, base)
        if member.isdir():
            if not os.path.isdir(path) or os.path.islink(path):
                self._remove(path)
                os.mkdir(path, 0o700)
            self._created.add(path)
            self._metadata(path, member)
            self._dir_times.append((path, int(member.mtime)))
            return
        self._remove(path)
        self._created.add(path)
        if member.islnk():
            self._hardlink(path, member)
            return  # a hard link shares its target's inode and metadata
        if member.isreg():
            self._write(path, member, archive)
            stats.files += 1
            stats.bytes += member.size
        elif member.issym():
            os.symlink(member.linkname, path)
        elif member.ischr() or member.isblk():
            kind = stat.S_IFCHR if member.ischr() else stat.S_IFBLK
            os.mknod(path, kind | 0o600, os.makedev(member.devmajor, member.devminor))
        elif member.isfifo():
            os.mkfifo(path, 0o600)
        else:
            log.warning("skipped layer entry of unknown type",
                        extra={"entry": member.name, "type": member.type.decode(errors="replace")})
            return
        self._metadata(path, member)

    def _whiteout(self, parts: list[str]) -> None:
        parent = self.parent(parts, create=False)
        if parent is None:
            return  # deletes something no lower layer has
        if parts[-1] == _OPAQUE:
            for child in os.listdir(parent):
                if os.path.join(parent, child) not in self._created:
                    self._remove(os.path.join(parent, child))
        elif not parts[-1].startswith(_WHITEOUT * 2):  # .wh..wh.* are aufs' own bookkeeping
            name = parts[-1][len(_WHITEOUT):]
            if name in ("", ".", ".."):  # `.wh..` would delete the directory above
                raise self._refused(f"whiteout {parts[-1]!r} names no entry")
            self._remove(os.path.join(parent, name))

    def _hardlink(self, path: str, member: tarfile.TarInfo) -> None:
        parts = self._clean(member.linkname)
        parent = self.parent(parts, create=False) if parts else None
        target = os.path.join(parent, parts[-1]) if parent is not None else ""
        try:
            linkable = bool(target) and not stat.S_ISDIR(os.lstat(target).st_mode)
        except FileNotFoundError:
            linkable = False
        if not linkable:
            raise self._refused(f"hard link {member.name[:200]!r} to "
                                               f"{member.linkname[:200]!r}: no such file")
        os.link(target, path, follow_symlinks=False)

    def _write(self, path: str, member: tarfile.TarInfo, archive: tarfile.TarFile) -> None:
        source = archive.extractfile(member)
        assert source is not None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(path, flags, 0o600), "wb") as out:
            shutil.copyfileobj(source, out, _COPY_CHUNK)

    def _metadata(self, path: str, member: tarfile.TarInfo) -> None:
        link = member.issym()
        os.chown(path, member.uid, member.gid, follow_symlinks=False)
        if not link:
            os.chmod(path, member.mode & 0o7777)  # after chown, which clears setuid
        for key, value in member.pax_headers.items():
            if key.startswith(_XATTR_PREFIX):
                self._xattr(path, key[len(_XATTR_PREFIX):], value, link)
        if not member.isdir():
            os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)

    def _xattr(self, path: str, name: str, value: str, link: bool) -> None:
        # tarfile decodes PAX values as UTF-8 with surrogateescape: this gives the bytes back.
        raw = value.encode("utf-8", "surrogateescape")
        try:
            os.setxattr(path, name, raw, follow_symlinks=False)
        except OSError as err:
            if name == "security.capability":
                raise self._refused(f"cannot set file capabilities on "
                                                   f"{path[len(self.root):]!r}: {err}") from None
            # user.* xattrs are not allowed on symlinks; others may be foreign to this kernel.
            if not link:
                log.warning("xattr skipped", extra={"xattr": name, "error": str(err)})

    def finish(self) -> None:
        """Set the layer's directory mtimes, deepest first (children bump their parents')."""
        for path, mtime in sorted(self._dir_times, key=lambda d: d[0].count("/"), reverse=True):
            with contextlib.suppress(FileNotFoundError):
                os.utime(path, (mtime, mtime), follow_symlinks=False)
