"""The volume store's typed errors.

Each subclasses the `aenv_common.errors` kind whose status the VolumeService edge answers (from
aenv_common.status_tables), and carries the NFSv3 status (`nfs_status`) the NFS server answers,
so the two edges agree on what each failure means.
"""

from __future__ import annotations

from aenv_common.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unimplemented,
)

# NFSv3 status codes (RFC 1813, section 2.6) the store's errors map to.
NFS3ERR_NOENT = 2
NFS3ERR_EXIST = 17
NFS3ERR_XDEV = 18
NFS3ERR_NOTDIR = 20
NFS3ERR_ISDIR = 21
NFS3ERR_INVAL = 22
NFS3ERR_FBIG = 27
NFS3ERR_NOSPC = 28
NFS3ERR_NAMETOOLONG = 63
NFS3ERR_NOTEMPTY = 66
NFS3ERR_STALE = 70
NFS3ERR_NOTSUPP = 10004


class VolumeNotFound(NotFound):
    nfs_status = NFS3ERR_STALE


class NoEntry(NotFound):
    nfs_status = NFS3ERR_NOENT


class Exists(AlreadyExists):
    nfs_status = NFS3ERR_EXIST


class NotDirectory(Conflict):
    nfs_status = NFS3ERR_NOTDIR


class IsDirectory(Conflict):
    nfs_status = NFS3ERR_ISDIR


class NotEmpty(Conflict):
    nfs_status = NFS3ERR_NOTEMPTY


class NoSpace(ResourceExhausted):
    """The volume's quota would be exceeded; never retriable by waiting (no retry hint)."""

    nfs_status = NFS3ERR_NOSPC


class InvalidName(InvalidArgument):
    nfs_status = NFS3ERR_INVAL


class NameTooLong(InvalidArgument):
    nfs_status = NFS3ERR_NAMETOOLONG


class StaleHandle(NotFound):
    """An inode number the volume does not hold (never did, or it was removed)."""

    nfs_status = NFS3ERR_STALE


class NotSupported(Unimplemented):
    """An operation a volume does not do."""

    nfs_status = NFS3ERR_NOTSUPP


class CrossVolume(InvalidArgument):
    nfs_status = NFS3ERR_XDEV


class TooBig(InvalidArgument):
    nfs_status = NFS3ERR_FBIG


VolumeError = (
    VolumeNotFound, NoEntry, Exists, NotDirectory, IsDirectory, NotEmpty, NoSpace, InvalidName,
    NameTooLong, StaleHandle, NotSupported, CrossVolume, TooBig,
)
