import datetime

from aenv.cluster.v1 import cluster_pb2 as _cluster_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VolumeForkMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VOLUME_FORK_MODE_UNSPECIFIED: _ClassVar[VolumeForkMode]
    VOLUME_FORK_MODE_SHARED: _ClassVar[VolumeForkMode]
    VOLUME_FORK_MODE_COPY_ON_WRITE: _ClassVar[VolumeForkMode]

class ExecSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXEC_SIGNAL_UNSPECIFIED: _ClassVar[ExecSignal]
    EXEC_SIGNAL_SIGKILL: _ClassVar[ExecSignal]
    EXEC_SIGNAL_SIGTERM: _ClassVar[ExecSignal]
VOLUME_FORK_MODE_UNSPECIFIED: VolumeForkMode
VOLUME_FORK_MODE_SHARED: VolumeForkMode
VOLUME_FORK_MODE_COPY_ON_WRITE: VolumeForkMode
EXEC_SIGNAL_UNSPECIFIED: ExecSignal
EXEC_SIGNAL_SIGKILL: ExecSignal
EXEC_SIGNAL_SIGTERM: ExecSignal

class CreateSandboxRequest(_message.Message):
    __slots__ = ("template_id", "timeout_seconds", "env_vars", "metadata", "network", "lifecycle", "idempotency_key", "volume_mounts", "lease_id")
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
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    timeout_seconds: int
    env_vars: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    network: _cluster_pb2.NetworkPolicy
    lifecycle: _cluster_pb2.Lifecycle
    idempotency_key: str
    volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMountRequest]
    lease_id: str
    def __init__(self, template_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., network: _Optional[_Union[_cluster_pb2.NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[_cluster_pb2.Lifecycle, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., volume_mounts: _Optional[_Iterable[_Union[VolumeMountRequest, _Mapping]]] = ..., lease_id: _Optional[str] = ...) -> None: ...

class VolumeMountRequest(_message.Message):
    __slots__ = ("path", "volume", "read_only")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    path: str
    volume: str
    read_only: bool
    def __init__(self, path: _Optional[str] = ..., volume: _Optional[str] = ..., read_only: _Optional[bool] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class CreateSandboxesRequest(_message.Message):
    __slots__ = ("template_id", "timeout_seconds", "env_vars", "metadata", "network", "lifecycle", "count", "items", "idempotency_key", "lease_id")
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
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    timeout_seconds: int
    env_vars: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    network: _cluster_pb2.NetworkPolicy
    lifecycle: _cluster_pb2.Lifecycle
    count: int
    items: _containers.RepeatedCompositeFieldContainer[CreateSandboxRequest]
    idempotency_key: str
    lease_id: str
    def __init__(self, template_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., network: _Optional[_Union[_cluster_pb2.NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[_cluster_pb2.Lifecycle, _Mapping]] = ..., count: _Optional[int] = ..., items: _Optional[_Iterable[_Union[CreateSandboxRequest, _Mapping]]] = ..., idempotency_key: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("metadata", "states", "template_id", "page_size", "page_token")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, str]
    states: _containers.RepeatedScalarFieldContainer[_cluster_pb2.SandboxState]
    template_id: str
    page_size: int
    page_token: str
    def __init__(self, metadata: _Optional[_Mapping[str, str]] = ..., states: _Optional[_Iterable[_Union[_cluster_pb2.SandboxState, str]]] = ..., template_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("sandboxes", "next_page_token")
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.SandboxRecord]
    next_page_token: str
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[_cluster_pb2.SandboxRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

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

class SetSandboxTimeoutRequest(_message.Message):
    __slots__ = ("sandbox_id", "timeout_seconds")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    timeout_seconds: int
    def __init__(self, sandbox_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class SetSandboxTimeoutResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class GetSandboxMetricsRequest(_message.Message):
    __slots__ = ("sandbox_id", "start", "end")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    start: int
    end: int
    def __init__(self, sandbox_id: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class GetSandboxMetricsResponse(_message.Message):
    __slots__ = ("metrics",)
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: _containers.RepeatedCompositeFieldContainer[SandboxMetric]
    def __init__(self, metrics: _Optional[_Iterable[_Union[SandboxMetric, _Mapping]]] = ...) -> None: ...

class SandboxMetric(_message.Message):
    __slots__ = ("timestamp", "cpu_count", "cpu_used_pct", "mem_used", "mem_total", "mem_cache", "disk_used", "disk_total")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    CPU_USED_PCT_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_FIELD_NUMBER: _ClassVar[int]
    MEM_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEM_CACHE_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_FIELD_NUMBER: _ClassVar[int]
    DISK_TOTAL_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    cpu_count: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    mem_cache: int
    disk_used: int
    disk_total: int
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cpu_count: _Optional[int] = ..., cpu_used_pct: _Optional[float] = ..., mem_used: _Optional[int] = ..., mem_total: _Optional[int] = ..., mem_cache: _Optional[int] = ..., disk_used: _Optional[int] = ..., disk_total: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("sandbox_id", "count", "timeout_seconds", "volume_mode")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MODE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    count: int
    timeout_seconds: int
    volume_mode: VolumeForkMode
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., timeout_seconds: _Optional[int] = ..., volume_mode: _Optional[_Union[VolumeForkMode, str]] = ...) -> None: ...

class ForkResult(_message.Message):
    __slots__ = ("sandbox", "error")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    error: ForkError
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ..., error: _Optional[_Union[ForkError, _Mapping]] = ...) -> None: ...

class ForkError(_message.Message):
    __slots__ = ("code", "message", "status")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    status: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

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

class ExecRequest(_message.Message):
    __slots__ = ("start", "stdin", "close_stdin", "resize", "signal")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_STDIN_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    start: ExecStart
    stdin: bytes
    close_stdin: CloseStdin
    resize: PtySize
    signal: ExecSignal
    def __init__(self, start: _Optional[_Union[ExecStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., close_stdin: _Optional[_Union[CloseStdin, _Mapping]] = ..., resize: _Optional[_Union[PtySize, _Mapping]] = ..., signal: _Optional[_Union[ExecSignal, str]] = ...) -> None: ...

class ExecStart(_message.Message):
    __slots__ = ("sandbox_id", "cmd", "args", "envs", "cwd", "user", "stdin", "pty", "timeout_seconds")
    class EnvsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CMD_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    ENVS_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    cmd: str
    args: _containers.RepeatedScalarFieldContainer[str]
    envs: _containers.ScalarMap[str, str]
    cwd: str
    user: str
    stdin: bool
    pty: PtySize
    timeout_seconds: int
    def __init__(self, sandbox_id: _Optional[str] = ..., cmd: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., envs: _Optional[_Mapping[str, str]] = ..., cwd: _Optional[str] = ..., user: _Optional[str] = ..., stdin: _Optional[bool] = ..., pty: _Optional[_Union[PtySize, _Mapping]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class PtySize(_message.Message):
    __slots__ = ("cols", "rows")
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    def __init__(self, cols: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class CloseStdin(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExecResponse(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "pty", "exit")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    started: ExecStarted
    stdout: bytes
    stderr: bytes
    pty: bytes
    exit: ExecExit
    def __init__(self, started: _Optional[_Union[ExecStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., pty: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class ExecStarted(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("exit_code", "exited", "status", "error")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    exited: bool
    status: str
    error: str
    def __init__(self, exit_code: _Optional[int] = ..., exited: _Optional[bool] = ..., status: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class PutFileRequest(_message.Message):
    __slots__ = ("start", "data")
    START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    start: FileTarget
    data: bytes
    def __init__(self, start: _Optional[_Union[FileTarget, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class FileTarget(_message.Message):
    __slots__ = ("sandbox_id", "path", "user")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    path: str
    user: str
    def __init__(self, sandbox_id: _Optional[str] = ..., path: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class PutFileResponse(_message.Message):
    __slots__ = ("path", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class GetFileRequest(_message.Message):
    __slots__ = ("file",)
    FILE_FIELD_NUMBER: _ClassVar[int]
    file: FileTarget
    def __init__(self, file: _Optional[_Union[FileTarget, _Mapping]] = ...) -> None: ...

class GetFileResponse(_message.Message):
    __slots__ = ("data", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size: int
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class ListSandboxEventsRequest(_message.Message):
    __slots__ = ("sandbox_id", "types", "metadata", "limit", "offset", "order_ascending")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ORDER_ASCENDING_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    types: _containers.RepeatedScalarFieldContainer[_cluster_pb2.SandboxEventType]
    metadata: _containers.ScalarMap[str, str]
    limit: int
    offset: int
    order_ascending: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., types: _Optional[_Iterable[_Union[_cluster_pb2.SandboxEventType, str]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., order_ascending: _Optional[bool] = ...) -> None: ...

class ListSandboxEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.SandboxEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_cluster_pb2.SandboxEvent, _Mapping]]] = ...) -> None: ...

class WatchSandboxEventsRequest(_message.Message):
    __slots__ = ("sandbox_id", "types", "metadata", "after_event_id", "lease_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    types: _containers.RepeatedScalarFieldContainer[_cluster_pb2.SandboxEventType]
    metadata: _containers.ScalarMap[str, str]
    after_event_id: str
    lease_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., types: _Optional[_Iterable[_Union[_cluster_pb2.SandboxEventType, str]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., after_event_id: _Optional[str] = ..., lease_id: _Optional[str] = ...) -> None: ...

class WatchSandboxEventsResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _cluster_pb2.SandboxEvent
    def __init__(self, event: _Optional[_Union[_cluster_pb2.SandboxEvent, _Mapping]] = ...) -> None: ...

class CreateLeaseRequest(_message.Message):
    __slots__ = ("ttl_seconds", "on_expiry", "name", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ON_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ttl_seconds: int
    on_expiry: _cluster_pb2.LeaseExpiryAction
    name: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, ttl_seconds: _Optional[int] = ..., on_expiry: _Optional[_Union[_cluster_pb2.LeaseExpiryAction, str]] = ..., name: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateLeaseResponse(_message.Message):
    __slots__ = ("lease", "expires_at")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    lease: _cluster_pb2.LeaseRecord
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, lease: _Optional[_Union[_cluster_pb2.LeaseRecord, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("expires_at",)
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class GetLeaseResponse(_message.Message):
    __slots__ = ("lease", "expires_at", "sandbox_count")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_COUNT_FIELD_NUMBER: _ClassVar[int]
    lease: _cluster_pb2.LeaseRecord
    expires_at: _timestamp_pb2.Timestamp
    sandbox_count: int
    def __init__(self, lease: _Optional[_Union[_cluster_pb2.LeaseRecord, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sandbox_count: _Optional[int] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[GetLeaseResponse]
    def __init__(self, leases: _Optional[_Iterable[_Union[GetLeaseResponse, _Mapping]]] = ...) -> None: ...

class ReleaseLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    def __init__(self, lease_id: _Optional[str] = ...) -> None: ...

class ReleaseLeaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SandboxFilter(_message.Message):
    __slots__ = ("metadata", "states", "template_id", "lease_id", "all")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    metadata: _containers.ScalarMap[str, str]
    states: _containers.RepeatedScalarFieldContainer[_cluster_pb2.SandboxState]
    template_id: str
    lease_id: str
    all: bool
    def __init__(self, metadata: _Optional[_Mapping[str, str]] = ..., states: _Optional[_Iterable[_Union[_cluster_pb2.SandboxState, str]]] = ..., template_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class SandboxOutcome(_message.Message):
    __slots__ = ("sandbox_id", "code", "message")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    code: str
    message: str
    def __init__(self, sandbox_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class KillSandboxesRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: SandboxFilter
    def __init__(self, filter: _Optional[_Union[SandboxFilter, _Mapping]] = ...) -> None: ...

class KillSandboxesResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[SandboxOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[SandboxOutcome, _Mapping]]] = ...) -> None: ...

class PauseSandboxesRequest(_message.Message):
    __slots__ = ("filter", "filesystem_only")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    FILESYSTEM_ONLY_FIELD_NUMBER: _ClassVar[int]
    filter: SandboxFilter
    filesystem_only: bool
    def __init__(self, filter: _Optional[_Union[SandboxFilter, _Mapping]] = ..., filesystem_only: _Optional[bool] = ...) -> None: ...

class PauseSandboxesResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[SandboxOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[SandboxOutcome, _Mapping]]] = ...) -> None: ...
