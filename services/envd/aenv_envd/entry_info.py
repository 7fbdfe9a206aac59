"""EntryInfo as upstream envd fills it (spec §3.5): Go mode strings, owners, xattr metadata."""

from __future__ import annotations

import errno
import os
import stat

from google.protobuf.timestamp_pb2 import Timestamp

from envd.filesystem import filesystem_pb2 as pb

from .users import owner_names

METADATA_XATTR_PREFIX = "user.e2b."
# An xattr name is at most 255 bytes; ext4 keeps all of an inode's xattrs in one 4 KiB block.
MAX_METADATA_KEY = 255 - len(METADATA_XATTR_PREFIX)
MAX_METADATA_TOTAL = 4096
# What listxattr/setxattr answer on filesystems without (user) xattrs, e.g. procfs, sysfs.
XATTR_UNSUPPORTED = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP})

# Go's os.FileMode.String(): one letter per type/special bit, in this order, then rwx triplets.
_GO_MODE_LETTERS = "dalTLDpSugct?"


def go_permissions(st_mode: int) -> str:
    """`-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`, `dtrwxrwxrwx` exactly like Go prints them."""
    fmt = stat.S_IFMT(st_mode)
    bits = [
        fmt == stat.S_IFDIR,  # d
        False,  # a: append-only (no stat equivalent)
        False,  # l: exclusive
        False,  # T: temporary
        fmt == stat.S_IFLNK,  # L
        fmt in (stat.S_IFBLK, stat.S_IFCHR),  # D: device
        fmt == stat.S_IFIFO,  # p
        fmt == stat.S_IFSOCK,  # S
        bool(st_mode & stat.S_ISUID),  # u
        bool(st_mode & stat.S_ISGID),  # g
        fmt == stat.S_IFCHR,  # c
        bool(st_mode & stat.S_ISVTX),  # t
        False,  # ?: irregular
    ]
    prefix = "".join(letter for letter, on in zip(_GO_MODE_LETTERS, bits, strict=True) if on)
    rwx = "".join(ch if st_mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return (prefix or "-") + rwx


def _file_type(st_mode: int) -> int:
    if stat.S_ISDIR(st_mode):
        return pb.FILE_TYPE_DIRECTORY
    if stat.S_ISLNK(st_mode):
        return pb.FILE_TYPE_SYMLINK
    return pb.FILE_TYPE_FILE


def read_metadata(target: str | int) -> dict[str, str]:
    """`user.e2b.<key>` extended attributes of a path or open file, the prefix stripped."""
    try:
        names = os.listxattr(target)
    except OSError:
        return {}
    metadata: dict[str, str] = {}
    for name in names:
        if name.startswith(METADATA_XATTR_PREFIX):
            try:
                value = os.getxattr(target, name)
            except OSError:
                continue
            metadata[name[len(METADATA_XATTR_PREFIX) :]] = value.decode(errors="replace")
    return metadata


def metadata_problem(metadata: dict[str, str]) -> str | None:
    """Why upstream would refuse this metadata (before any syscall), or None."""
    total = 0
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY:
            return f"metadata key {key!r} exceeds {MAX_METADATA_KEY} bytes"
        for label, text in (("key", key), (f"value for key {key!r}", value)):
            if not (text.isascii() and text.isprintable()):
                return f"metadata {label} must be printable ASCII"
        total += len(METADATA_XATTR_PREFIX) + len(key) + len(value)
    if total > MAX_METADATA_TOTAL:
        return f"total metadata size {total} exceeds {MAX_METADATA_TOTAL} bytes"
    return None


def write_metadata(target: str | int, metadata: dict[str, str]) -> None:
    """Replaces the metadata of a path or open file: keys absent from `metadata` are removed,
    so `{}` clears it."""
    for name in os.listxattr(target):
        if name.startswith(METADATA_XATTR_PREFIX) and (
            name[len(METADATA_XATTR_PREFIX) :] not in metadata
        ):
            try:
                os.removexattr(target, name)
            except OSError as exc:
                if exc.errno != errno.ENODATA:
                    raise
    for key, value in metadata.items():
        os.setxattr(target, METADATA_XATTR_PREFIX + key, value.encode())


def entry_info(path: str) -> pb.EntryInfo:
    """EntryInfo for `path` (absolute, symlinks in it unresolved). Raises OSError."""
    link_stat = os.lstat(path)
    target_stat = link_stat
    entry = pb.EntryInfo(name=os.path.basename(path) or path, path=path)
    if stat.S_ISLNK(link_stat.st_mode):
        entry.is_symlink = True
        entry.symlink_target = os.path.realpath(path)
        try:
            target_stat = os.stat(path)
        except OSError as exc:  # dangling link: describe the link itself
            if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EACCES):
                raise
    entry.type = _file_type(target_stat.st_mode)  # type: ignore[assignment]
    entry.size = target_stat.st_size
    entry.mode = stat.S_IMODE(target_stat.st_mode) & 0o777
    entry.permissions = go_permissions(link_stat.st_mode)
    entry.owner, entry.group = owner_names(link_stat.st_uid, link_stat.st_gid)
    modified = Timestamp()
    modified.FromNanoseconds(link_stat.st_mtime_ns)
    entry.modified_time.CopyFrom(modified)
    metadata = read_metadata(path)
    if metadata:
        entry.metadata.update(metadata)
    return entry
