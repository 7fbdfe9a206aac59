"""Volumes: persistent, shareable, forkable filesystems kept in snapstore's backend.

A volume is a metadata database plus content-addressed chunks (architecture.md, Volumes); this
package stores them (`VolumeStore`, `Volume`), the NFS server (`aenv_snapstore.nfs`) and the
VolumeService serve them.
"""

from aenv_snapstore.volumes.errors import (
    CrossVolume,
    Exists,
    InvalidName,
    IsDirectory,
    NameTooLong,
    NoEntry,
    NoSpace,
    NotDirectory,
    NotEmpty,
    NotSupported,
    StaleHandle,
    TooBig,
    VolumeNotFound,
)
from aenv_snapstore.volumes.model import (
    ROOT_INO,
    Attr,
    DirEntry,
    FsStat,
    Kind,
    Usage,
)
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.volume import Volume

__all__ = [
    "ROOT_INO", "Attr", "CrossVolume", "DirEntry", "Exists", "FsStat", "InvalidName",
    "IsDirectory", "Kind", "NameTooLong", "NoEntry", "NoSpace", "NotDirectory", "NotEmpty",
    "NotSupported", "StaleHandle", "TooBig", "Usage", "Volume", "VolumeNotFound", "VolumeStore",
]
