from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VolumeEntryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VOLUME_ENTRY_TYPE_UNSPECIFIED: _ClassVar[VolumeEntryType]
    VOLUME_ENTRY_TYPE_FILE: _ClassVar[VolumeEntryType]
    VOLUME_ENTRY_TYPE_DIRECTORY: _ClassVar[VolumeEntryType]
    VOLUME_ENTRY_TYPE_SYMLINK: _ClassVar[VolumeEntryType]
VOLUME_ENTRY_TYPE_UNSPECIFIED: VolumeEntryType
VOLUME_ENTRY_TYPE_FILE: VolumeEntryType
VOLUME_ENTRY_TYPE_DIRECTORY: VolumeEntryType
VOLUME_ENTRY_TYPE_SYMLINK: VolumeEntryType

class Chunk(_message.Message):
    __slots__ = ("digest", "data", "size")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    data: bytes
    size: int
    def __init__(self, digest: _Optional[str] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class FileEntry(_message.Message):
    __slots__ = ("name", "size", "chunk_size", "chunk_digests")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    chunk_size: int
    chunk_digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., chunk_size: _Optional[int] = ..., chunk_digests: _Optional[_Iterable[str]] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("snapshot_id", "parent_id", "files", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    parent_id: str
    files: _containers.RepeatedCompositeFieldContainer[FileEntry]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, snapshot_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[FileEntry, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FindMissingChunksRequest(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digests: _Optional[_Iterable[str]] = ...) -> None: ...

class FindMissingChunksResponse(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digests: _Optional[_Iterable[str]] = ...) -> None: ...

class PutChunksRequest(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: Chunk
    def __init__(self, chunk: _Optional[_Union[Chunk, _Mapping]] = ...) -> None: ...

class PutChunksResponse(_message.Message):
    __slots__ = ("stored", "stored_bytes")
    STORED_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    stored: int
    stored_bytes: int
    def __init__(self, stored: _Optional[int] = ..., stored_bytes: _Optional[int] = ...) -> None: ...

class GetChunksRequest(_message.Message):
    __slots__ = ("digests",)
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    digests: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, digests: _Optional[_Iterable[str]] = ...) -> None: ...

class GetChunksResponse(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: Chunk
    def __init__(self, chunk: _Optional[_Union[Chunk, _Mapping]] = ...) -> None: ...

class PutManifestRequest(_message.Message):
    __slots__ = ("manifest",)
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    manifest: Manifest
    def __init__(self, manifest: _Optional[_Union[Manifest, _Mapping]] = ...) -> None: ...

class PutManifestResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetManifestRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class GetManifestResponse(_message.Message):
    __slots__ = ("manifest",)
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    manifest: Manifest
    def __init__(self, manifest: _Optional[_Union[Manifest, _Mapping]] = ...) -> None: ...

class ListManifestsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListManifestsResponse(_message.Message):
    __slots__ = ("snapshot_ids",)
    SNAPSHOT_IDS_FIELD_NUMBER: _ClassVar[int]
    snapshot_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, snapshot_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteManifestRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteManifestResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CollectGarbageRequest(_message.Message):
    __slots__ = ("grace_seconds",)
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    grace_seconds: int
    def __init__(self, grace_seconds: _Optional[int] = ...) -> None: ...

class CollectGarbageResponse(_message.Message):
    __slots__ = ("deleted_chunks", "deleted_bytes", "kept_chunks")
    DELETED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    DELETED_BYTES_FIELD_NUMBER: _ClassVar[int]
    KEPT_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    deleted_chunks: int
    deleted_bytes: int
    kept_chunks: int
    def __init__(self, deleted_chunks: _Optional[int] = ..., deleted_bytes: _Optional[int] = ..., kept_chunks: _Optional[int] = ...) -> None: ...

class CreateVolumeRequest(_message.Message):
    __slots__ = ("volume_id", "quota_bytes")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    quota_bytes: int
    def __init__(self, volume_id: _Optional[str] = ..., quota_bytes: _Optional[int] = ...) -> None: ...

class CreateVolumeResponse(_message.Message):
    __slots__ = ("quota_bytes",)
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    quota_bytes: int
    def __init__(self, quota_bytes: _Optional[int] = ...) -> None: ...

class DestroyVolumeRequest(_message.Message):
    __slots__ = ("volume_id",)
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    def __init__(self, volume_id: _Optional[str] = ...) -> None: ...

class DestroyVolumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloneVolumeRequest(_message.Message):
    __slots__ = ("source_id", "volume_id")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    volume_id: str
    def __init__(self, source_id: _Optional[str] = ..., volume_id: _Optional[str] = ...) -> None: ...

class CloneVolumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetVolumeUsageRequest(_message.Message):
    __slots__ = ("volume_id",)
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    def __init__(self, volume_id: _Optional[str] = ...) -> None: ...

class GetVolumeUsageResponse(_message.Message):
    __slots__ = ("used_bytes", "quota_bytes", "files")
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    used_bytes: int
    quota_bytes: int
    files: int
    def __init__(self, used_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ..., files: _Optional[int] = ...) -> None: ...

class GrantMountRequest(_message.Message):
    __slots__ = ("sandbox_id", "volume_id", "seen_as", "read_only")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    SEEN_AS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    volume_id: str
    seen_as: str
    read_only: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., volume_id: _Optional[str] = ..., seen_as: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class GrantMountResponse(_message.Message):
    __slots__ = ("ticket",)
    TICKET_FIELD_NUMBER: _ClassVar[int]
    ticket: str
    def __init__(self, ticket: _Optional[str] = ...) -> None: ...

class GetVolumeEndpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetVolumeEndpointResponse(_message.Message):
    __slots__ = ("nfs_address",)
    NFS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    nfs_address: str
    def __init__(self, nfs_address: _Optional[str] = ...) -> None: ...

class VolumeEntry(_message.Message):
    __slots__ = ("name", "path", "type", "size", "mode", "uid", "gid", "atime_ns", "mtime_ns", "ctime_ns", "target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    ATIME_NS_FIELD_NUMBER: _ClassVar[int]
    MTIME_NS_FIELD_NUMBER: _ClassVar[int]
    CTIME_NS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    type: VolumeEntryType
    size: int
    mode: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    target: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., type: _Optional[_Union[VolumeEntryType, str]] = ..., size: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., atime_ns: _Optional[int] = ..., mtime_ns: _Optional[int] = ..., ctime_ns: _Optional[int] = ..., target: _Optional[str] = ...) -> None: ...

class StatPathRequest(_message.Message):
    __slots__ = ("volume_id", "path")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ListDirRequest(_message.Message):
    __slots__ = ("volume_id", "path", "depth")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    depth: int
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[VolumeEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[VolumeEntry, _Mapping]]] = ...) -> None: ...

class MakeDirRequest(_message.Message):
    __slots__ = ("volume_id", "path", "uid", "gid", "mode", "force")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    uid: int
    gid: int
    mode: int
    force: bool
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mode: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class UpdateMetadataRequest(_message.Message):
    __slots__ = ("volume_id", "path", "uid", "gid", "mode")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    uid: int
    gid: int
    mode: int
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mode: _Optional[int] = ...) -> None: ...

class RemovePathRequest(_message.Message):
    __slots__ = ("volume_id", "path")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class RemovePathResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("volume_id", "path")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class WriteFileHeader(_message.Message):
    __slots__ = ("volume_id", "path", "uid", "gid", "mode", "force")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    path: str
    uid: int
    gid: int
    mode: int
    force: bool
    def __init__(self, volume_id: _Optional[str] = ..., path: _Optional[str] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., mode: _Optional[int] = ..., force: _Optional[bool] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ("header", "data", "end")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    header: WriteFileHeader
    data: bytes
    end: bool
    def __init__(self, header: _Optional[_Union[WriteFileHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., end: _Optional[bool] = ...) -> None: ...

class StatPathResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: VolumeEntry
    def __init__(self, entry: _Optional[_Union[VolumeEntry, _Mapping]] = ...) -> None: ...

class MakeDirResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: VolumeEntry
    def __init__(self, entry: _Optional[_Union[VolumeEntry, _Mapping]] = ...) -> None: ...

class UpdateMetadataResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: VolumeEntry
    def __init__(self, entry: _Optional[_Union[VolumeEntry, _Mapping]] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: VolumeEntry
    def __init__(self, entry: _Optional[_Union[VolumeEntry, _Mapping]] = ...) -> None: ...
