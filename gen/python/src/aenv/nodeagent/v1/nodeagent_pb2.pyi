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

class LogLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_LEVEL_UNSPECIFIED: _ClassVar[LogLevel]
    LOG_LEVEL_DEBUG: _ClassVar[LogLevel]
    LOG_LEVEL_INFO: _ClassVar[LogLevel]
    LOG_LEVEL_WARN: _ClassVar[LogLevel]
    LOG_LEVEL_ERROR: _ClassVar[LogLevel]
LOG_LEVEL_UNSPECIFIED: LogLevel
LOG_LEVEL_DEBUG: LogLevel
LOG_LEVEL_INFO: LogLevel
LOG_LEVEL_WARN: LogLevel
LOG_LEVEL_ERROR: LogLevel

class ResolveImageRequest(_message.Message):
    __slots__ = ("reference", "registry")
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_FIELD_NUMBER: _ClassVar[int]
    reference: str
    registry: RegistryCredentials
    def __init__(self, reference: _Optional[str] = ..., registry: _Optional[_Union[RegistryCredentials, _Mapping]] = ...) -> None: ...

class ResolveImageResponse(_message.Message):
    __slots__ = ("digest",)
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: str
    def __init__(self, digest: _Optional[str] = ...) -> None: ...

class TemplateStep(_message.Message):
    __slots__ = ("type", "args", "files_hash")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    FILES_HASH_FIELD_NUMBER: _ClassVar[int]
    type: str
    args: _containers.RepeatedScalarFieldContainer[str]
    files_hash: str
    def __init__(self, type: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., files_hash: _Optional[str] = ...) -> None: ...

class BuildTemplateRequest(_message.Message):
    __slots__ = ("template_id", "build_id", "from_image", "from_template", "registry", "steps", "start_cmd", "ready_cmd", "resources", "force", "min_free_disk_mib")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_IMAGE_FIELD_NUMBER: _ClassVar[int]
    FROM_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    START_CMD_FIELD_NUMBER: _ClassVar[int]
    READY_CMD_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    MIN_FREE_DISK_MIB_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    build_id: str
    from_image: str
    from_template: str
    registry: RegistryCredentials
    steps: _containers.RepeatedCompositeFieldContainer[TemplateStep]
    start_cmd: str
    ready_cmd: str
    resources: _cluster_pb2.Resources
    force: bool
    min_free_disk_mib: int
    def __init__(self, template_id: _Optional[str] = ..., build_id: _Optional[str] = ..., from_image: _Optional[str] = ..., from_template: _Optional[str] = ..., registry: _Optional[_Union[RegistryCredentials, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[TemplateStep, _Mapping]]] = ..., start_cmd: _Optional[str] = ..., ready_cmd: _Optional[str] = ..., resources: _Optional[_Union[_cluster_pb2.Resources, _Mapping]] = ..., force: _Optional[bool] = ..., min_free_disk_mib: _Optional[int] = ...) -> None: ...

class RegistryCredentials(_message.Message):
    __slots__ = ("username", "password")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    username: str
    password: str
    def __init__(self, username: _Optional[str] = ..., password: _Optional[str] = ...) -> None: ...

class BuildTemplateResponse(_message.Message):
    __slots__ = ("log", "result")
    LOG_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    log: BuildLogLine
    result: BuildTemplateResult
    def __init__(self, log: _Optional[_Union[BuildLogLine, _Mapping]] = ..., result: _Optional[_Union[BuildTemplateResult, _Mapping]] = ...) -> None: ...

class BuildLogLine(_message.Message):
    __slots__ = ("time", "level", "message", "step")
    TIME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    level: str
    message: str
    step: str
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., level: _Optional[str] = ..., message: _Optional[str] = ..., step: _Optional[str] = ...) -> None: ...

class BuildTemplateResult(_message.Message):
    __slots__ = ("template", "phases_ms")
    class PhasesMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PHASES_MS_FIELD_NUMBER: _ClassVar[int]
    template: _cluster_pb2.TemplateRecord
    phases_ms: _containers.ScalarMap[str, float]
    def __init__(self, template: _Optional[_Union[_cluster_pb2.TemplateRecord, _Mapping]] = ..., phases_ms: _Optional[_Mapping[str, float]] = ...) -> None: ...

class TakeOverSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "discard")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    DISCARD_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    discard: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., discard: _Optional[bool] = ...) -> None: ...

class TakeOverSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

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

class GetLatestSandboxMetricsRequest(_message.Message):
    __slots__ = ("sandbox_ids",)
    SANDBOX_IDS_FIELD_NUMBER: _ClassVar[int]
    sandbox_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sandbox_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GetLatestSandboxMetricsResponse(_message.Message):
    __slots__ = ("metrics",)
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SandboxMetric
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SandboxMetric, _Mapping]] = ...) -> None: ...
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: _containers.MessageMap[str, SandboxMetric]
    def __init__(self, metrics: _Optional[_Mapping[str, SandboxMetric]] = ...) -> None: ...

class SandboxLogEntry(_message.Message):
    __slots__ = ("timestamp", "level", "message", "fields", "line")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    level: LogLevel
    message: str
    fields: _containers.ScalarMap[str, str]
    line: str
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., level: _Optional[_Union[LogLevel, str]] = ..., message: _Optional[str] = ..., fields: _Optional[_Mapping[str, str]] = ..., line: _Optional[str] = ...) -> None: ...

class GetSandboxLogsRequest(_message.Message):
    __slots__ = ("sandbox_id", "start_ms", "end_ms", "limit", "backward", "min_level", "search")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_FIELD_NUMBER: _ClassVar[int]
    MIN_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    start_ms: int
    end_ms: int
    limit: int
    backward: bool
    min_level: LogLevel
    search: str
    def __init__(self, sandbox_id: _Optional[str] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., limit: _Optional[int] = ..., backward: _Optional[bool] = ..., min_level: _Optional[_Union[LogLevel, str]] = ..., search: _Optional[str] = ...) -> None: ...

class GetSandboxLogsResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[SandboxLogEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[SandboxLogEntry, _Mapping]]] = ...) -> None: ...

class UpdateSandboxNetworkRequest(_message.Message):
    __slots__ = ("sandbox_id", "network")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    network: _cluster_pb2.NetworkPolicy
    def __init__(self, sandbox_id: _Optional[str] = ..., network: _Optional[_Union[_cluster_pb2.NetworkPolicy, _Mapping]] = ...) -> None: ...

class UpdateSandboxNetworkResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class PauseSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "keep_memory", "require_healthy_guest")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_MEMORY_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_HEALTHY_GUEST_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    keep_memory: bool
    require_healthy_guest: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., keep_memory: _Optional[bool] = ..., require_healthy_guest: _Optional[bool] = ...) -> None: ...

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
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("snapshot_id", "sandbox_id", "name", "has_memory", "created_at", "template_id")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HAS_MEMORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    sandbox_id: str
    name: str
    has_memory: bool
    created_at: _timestamp_pb2.Timestamp
    template_id: str
    def __init__(self, snapshot_id: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., has_memory: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., template_id: _Optional[str] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("sandbox_id", "name", "keep_memory")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEEP_MEMORY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    keep_memory: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., keep_memory: _Optional[bool] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForkSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "count", "timeout_seconds", "child_ids", "child_tokens", "child_volume_mounts")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHILD_IDS_FIELD_NUMBER: _ClassVar[int]
    CHILD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHILD_VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    count: int
    timeout_seconds: int
    child_ids: _containers.RepeatedScalarFieldContainer[str]
    child_tokens: _containers.RepeatedScalarFieldContainer[str]
    child_volume_mounts: _containers.RepeatedCompositeFieldContainer[ChildVolumeMounts]
    def __init__(self, sandbox_id: _Optional[str] = ..., count: _Optional[int] = ..., timeout_seconds: _Optional[int] = ..., child_ids: _Optional[_Iterable[str]] = ..., child_tokens: _Optional[_Iterable[str]] = ..., child_volume_mounts: _Optional[_Iterable[_Union[ChildVolumeMounts, _Mapping]]] = ...) -> None: ...

class ChildVolumeMounts(_message.Message):
    __slots__ = ("mounts",)
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    mounts: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.VolumeMount]
    def __init__(self, mounts: _Optional[_Iterable[_Union[_cluster_pb2.VolumeMount, _Mapping]]] = ...) -> None: ...

class ForkResult(_message.Message):
    __slots__ = ("sandbox", "error")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    error: ForkError
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ..., error: _Optional[_Union[ForkError, _Mapping]] = ...) -> None: ...

class ForkError(_message.Message):
    __slots__ = ("message", "status")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    message: str
    status: str
    def __init__(self, message: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

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

class CreateSandboxRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _cluster_pb2.SandboxSpec
    def __init__(self, spec: _Optional[_Union[_cluster_pb2.SandboxSpec, _Mapping]] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class KillSandboxRequest(_message.Message):
    __slots__ = ("sandbox_id", "cause", "detail")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    cause: _cluster_pb2.DeathCause
    detail: str
    def __init__(self, sandbox_id: _Optional[str] = ..., cause: _Optional[_Union[_cluster_pb2.DeathCause, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class KillSandboxResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

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
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[_cluster_pb2.SandboxRecord]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[_cluster_pb2.SandboxRecord, _Mapping]]] = ...) -> None: ...

class SetSandboxTimeoutRequest(_message.Message):
    __slots__ = ("sandbox_id", "timeout_seconds", "extend_only")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXTEND_ONLY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    timeout_seconds: int
    extend_only: bool
    def __init__(self, sandbox_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., extend_only: _Optional[bool] = ...) -> None: ...

class SetSandboxTimeoutResponse(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: _cluster_pb2.SandboxRecord
    def __init__(self, sandbox: _Optional[_Union[_cluster_pb2.SandboxRecord, _Mapping]] = ...) -> None: ...

class GetNodeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeInfoResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _cluster_pb2.NodeRecord
    def __init__(self, node: _Optional[_Union[_cluster_pb2.NodeRecord, _Mapping]] = ...) -> None: ...
