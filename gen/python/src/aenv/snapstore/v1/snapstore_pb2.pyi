from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
