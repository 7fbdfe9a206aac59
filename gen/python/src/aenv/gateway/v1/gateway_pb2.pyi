from aenv.cluster.v1 import cluster_pb2 as _cluster_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSandboxRequest(_message.Message):
    __slots__ = ("template_id", "timeout_seconds", "env_vars", "metadata", "network", "lifecycle", "idempotency_key")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    timeout_seconds: int
    env_vars: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    network: _cluster_pb2.NetworkPolicy
    lifecycle: _cluster_pb2.Lifecycle
    idempotency_key: str
    def __init__(self, template_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., network: _Optional[_Union[_cluster_pb2.NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[_cluster_pb2.Lifecycle, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class CreateSandboxesRequest(_message.Message):
    __slots__ = ("template_id", "timeout_seconds", "env_vars", "metadata", "network", "lifecycle", "count", "items", "idempotency_key")
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    timeout_seconds: int
    env_vars: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    network: _cluster_pb2.NetworkPolicy
    lifecycle: _cluster_pb2.Lifecycle
    count: int
    items: _containers.RepeatedCompositeFieldContainer[CreateSandboxRequest]
    idempotency_key: str
    def __init__(self, template_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., network: _Optional[_Union[_cluster_pb2.NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[_cluster_pb2.Lifecycle, _Mapping]] = ..., count: _Optional[int] = ..., items: _Optional[_Iterable[_Union[CreateSandboxRequest, _Mapping]]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class CreateSandboxesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateResult, _Mapping]]] = ...) -> None: ...

class CreateResult(_message.Message):
    __slots__ = ("sandbox", "error")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    error: SandboxError
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ..., error: _Optional[_Union[SandboxError, _Mapping]] = ...) -> None: ...

class SandboxError(_message.Message):
    __slots__ = ("code", "message", "status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    status: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class GetSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class ListSandboxesRequest(_message.Message):
    __slots__ = ("metadata",)
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.SandboxRecord]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[_cluster_pb2.SandboxRecord, _Mapping]]] = ...) -> None: ...

class KillSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class KillSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "filesystem_only")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEM_ONLY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    filesystem_only: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., filesystem_only: _Optional[bool] = ...) -> None: ...

class PauseSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class ResumeSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "timeout_seconds", "reboot")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REBOOT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    timeout_seconds: int
    reboot: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., reboot: _Optional[bool] = ...) -> None: ...

class ResumeSandboxResponse(_message.Message):
    __slots__ = ("sandbox", "resumed")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    resumed: bool
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ..., resumed: _Optional[bool] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("sandbox_id", "name", "filesystem_only")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEM_ONLY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    filesystem_only: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., filesystem_only: _Optional[bool] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: _cluster_pb2.SnapshotRecord
    def __init__(self, snapshot: _Optional[_Union[_cluster_pb2.SnapshotRecord, _Mapping]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("sandbox_id", "name", "limit", "page_token")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    limit: int
    page_token: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots", "next_page_token")
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.SnapshotRecord]
    next_page_token: str
    def __init__(self, snapshots: _Optional[_Iterable[_Union[_cluster_pb2.SnapshotRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForkSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "count", "timeout_seconds")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    count: int
    timeout_seconds: int
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class ForkResult(_message.Message):
    __slots__ = ("sandbox", "error")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    error: ForkError
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ..., error: _Optional[_Union[ForkError, _Mapping]] = ...) -> None: ...

class ForkError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ForkSandboxResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ForkResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ForkResult, _Mapping]]] = ...) -> None: ...

class ResetSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "snapshot_id")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    snapshot_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class ResetSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...
