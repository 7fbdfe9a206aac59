import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SandboxState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_STATE_UNSPECIFIED: _ClassVar[SandboxState]
    SANDBOX_STATE_CREATING: _ClassVar[SandboxState]
    SANDBOX_STATE_RUNNING: _ClassVar[SandboxState]
    SANDBOX_STATE_PAUSED: _ClassVar[SandboxState]
    SANDBOX_STATE_KILLING: _ClassVar[SandboxState]
    SANDBOX_STATE_LOST: _ClassVar[SandboxState]

class PauseMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAUSE_MODE_UNSPECIFIED: _ClassVar[PauseMode]
    PAUSE_MODE_FILESYSTEM: _ClassVar[PauseMode]

class BuildStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUILD_STATUS_UNSPECIFIED: _ClassVar[BuildStatus]
    BUILD_STATUS_WAITING: _ClassVar[BuildStatus]
    BUILD_STATUS_BUILDING: _ClassVar[BuildStatus]
    BUILD_STATUS_READY: _ClassVar[BuildStatus]
    BUILD_STATUS_ERROR: _ClassVar[BuildStatus]

class SandboxEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_EVENT_TYPE_UNSPECIFIED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_CREATED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_READY: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_PAUSED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_RESUMED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_SNAPSHOTTED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_FORKED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_KILLED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_TIMED_OUT: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_LOST: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_DIED: _ClassVar[SandboxEventType]
    SANDBOX_EVENT_TYPE_UPDATED: _ClassVar[SandboxEventType]

class DeathCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEATH_CAUSE_UNSPECIFIED: _ClassVar[DeathCause]
    DEATH_CAUSE_GUEST_OOM: _ClassVar[DeathCause]
    DEATH_CAUSE_GUEST_CRASH: _ClassVar[DeathCause]
    DEATH_CAUSE_GUEST_HANG: _ClassVar[DeathCause]
    DEATH_CAUSE_VMM_CRASH: _ClassVar[DeathCause]
    DEATH_CAUSE_NODE_LOST: _ClassVar[DeathCause]
    DEATH_CAUSE_EVICTED_MEMORY_PRESSURE: _ClassVar[DeathCause]
    DEATH_CAUSE_DISK_FULL: _ClassVar[DeathCause]
    DEATH_CAUSE_ADMIN_KILL: _ClassVar[DeathCause]
    DEATH_CAUSE_LEASE_EXPIRED: _ClassVar[DeathCause]

class LeaseExpiryAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_EXPIRY_ACTION_UNSPECIFIED: _ClassVar[LeaseExpiryAction]
    LEASE_EXPIRY_ACTION_KILL: _ClassVar[LeaseExpiryAction]
    LEASE_EXPIRY_ACTION_PAUSE: _ClassVar[LeaseExpiryAction]
SANDBOX_STATE_UNSPECIFIED: SandboxState
SANDBOX_STATE_CREATING: SandboxState
SANDBOX_STATE_RUNNING: SandboxState
SANDBOX_STATE_PAUSED: SandboxState
SANDBOX_STATE_KILLING: SandboxState
SANDBOX_STATE_LOST: SandboxState
PAUSE_MODE_UNSPECIFIED: PauseMode
PAUSE_MODE_FILESYSTEM: PauseMode
BUILD_STATUS_UNSPECIFIED: BuildStatus
BUILD_STATUS_WAITING: BuildStatus
BUILD_STATUS_BUILDING: BuildStatus
BUILD_STATUS_READY: BuildStatus
BUILD_STATUS_ERROR: BuildStatus
SANDBOX_EVENT_TYPE_UNSPECIFIED: SandboxEventType
SANDBOX_EVENT_TYPE_CREATED: SandboxEventType
SANDBOX_EVENT_TYPE_READY: SandboxEventType
SANDBOX_EVENT_TYPE_PAUSED: SandboxEventType
SANDBOX_EVENT_TYPE_RESUMED: SandboxEventType
SANDBOX_EVENT_TYPE_SNAPSHOTTED: SandboxEventType
SANDBOX_EVENT_TYPE_FORKED: SandboxEventType
SANDBOX_EVENT_TYPE_KILLED: SandboxEventType
SANDBOX_EVENT_TYPE_TIMED_OUT: SandboxEventType
SANDBOX_EVENT_TYPE_LOST: SandboxEventType
SANDBOX_EVENT_TYPE_DIED: SandboxEventType
SANDBOX_EVENT_TYPE_UPDATED: SandboxEventType
DEATH_CAUSE_UNSPECIFIED: DeathCause
DEATH_CAUSE_GUEST_OOM: DeathCause
DEATH_CAUSE_GUEST_CRASH: DeathCause
DEATH_CAUSE_GUEST_HANG: DeathCause
DEATH_CAUSE_VMM_CRASH: DeathCause
DEATH_CAUSE_NODE_LOST: DeathCause
DEATH_CAUSE_EVICTED_MEMORY_PRESSURE: DeathCause
DEATH_CAUSE_DISK_FULL: DeathCause
DEATH_CAUSE_ADMIN_KILL: DeathCause
DEATH_CAUSE_LEASE_EXPIRED: DeathCause
LEASE_EXPIRY_ACTION_UNSPECIFIED: LeaseExpiryAction
LEASE_EXPIRY_ACTION_KILL: LeaseExpiryAction
LEASE_EXPIRY_ACTION_PAUSE: LeaseExpiryAction

class Resources(_message.Message):
    __slots__ = ("vcpus", "memory_mib", "disk_mib")
    VCPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    DISK_MIB_FIELD_NUMBER: _ClassVar[int]
    vcpus: int
    memory_mib: int
    disk_mib: int
    def __init__(self, vcpus: _Optional[int] = ..., memory_mib: _Optional[int] = ..., disk_mib: _Optional[int] = ...) -> None: ...

class NetworkPolicy(_message.Message):
    __slots__ = ("allow_internet_access", "allow_out", "deny_out", "dns_servers", "mask_request_host", "private_traffic", "https_ports", "internet_access_explicit", "rules", "egress_proxy")
    ALLOW_INTERNET_ACCESS_FIELD_NUMBER: _ClassVar[int]
    ALLOW_OUT_FIELD_NUMBER: _ClassVar[int]
    DENY_OUT_FIELD_NUMBER: _ClassVar[int]
    DNS_SERVERS_FIELD_NUMBER: _ClassVar[int]
    MASK_REQUEST_HOST_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    HTTPS_PORTS_FIELD_NUMBER: _ClassVar[int]
    INTERNET_ACCESS_EXPLICIT_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    EGRESS_PROXY_FIELD_NUMBER: _ClassVar[int]
    allow_internet_access: bool
    allow_out: _containers.RepeatedScalarFieldContainer[str]
    deny_out: _containers.RepeatedScalarFieldContainer[str]
    dns_servers: _containers.RepeatedScalarFieldContainer[str]
    mask_request_host: str
    private_traffic: bool
    https_ports: _containers.RepeatedScalarFieldContainer[int]
    internet_access_explicit: bool
    rules: _containers.RepeatedCompositeFieldContainer[NetworkRule]
    egress_proxy: EgressProxy
    def __init__(self, allow_internet_access: _Optional[bool] = ..., allow_out: _Optional[_Iterable[str]] = ..., deny_out: _Optional[_Iterable[str]] = ..., dns_servers: _Optional[_Iterable[str]] = ..., mask_request_host: _Optional[str] = ..., private_traffic: _Optional[bool] = ..., https_ports: _Optional[_Iterable[int]] = ..., internet_access_explicit: _Optional[bool] = ..., rules: _Optional[_Iterable[_Union[NetworkRule, _Mapping]]] = ..., egress_proxy: _Optional[_Union[EgressProxy, _Mapping]] = ...) -> None: ...

class NetworkRule(_message.Message):
    __slots__ = ("host", "transforms")
    HOST_FIELD_NUMBER: _ClassVar[int]
    TRANSFORMS_FIELD_NUMBER: _ClassVar[int]
    host: str
    transforms: _containers.RepeatedCompositeFieldContainer[HeaderTransform]
    def __init__(self, host: _Optional[str] = ..., transforms: _Optional[_Iterable[_Union[HeaderTransform, _Mapping]]] = ...) -> None: ...

class HeaderTransform(_message.Message):
    __slots__ = ("set_headers", "add_headers", "remove_headers")
    class SetHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AddHeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SET_HEADERS_FIELD_NUMBER: _ClassVar[int]
    ADD_HEADERS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_HEADERS_FIELD_NUMBER: _ClassVar[int]
    set_headers: _containers.ScalarMap[str, str]
    add_headers: _containers.ScalarMap[str, str]
    remove_headers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, set_headers: _Optional[_Mapping[str, str]] = ..., add_headers: _Optional[_Mapping[str, str]] = ..., remove_headers: _Optional[_Iterable[str]] = ...) -> None: ...

class EgressProxy(_message.Message):
    __slots__ = ("address", "username", "sealed_password", "tls", "tls_server_name", "tls_ca_cert")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    SEALED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    TLS_SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    TLS_CA_CERT_FIELD_NUMBER: _ClassVar[int]
    address: str
    username: str
    sealed_password: bytes
    tls: bool
    tls_server_name: str
    tls_ca_cert: str
    def __init__(self, address: _Optional[str] = ..., username: _Optional[str] = ..., sealed_password: _Optional[bytes] = ..., tls: _Optional[bool] = ..., tls_server_name: _Optional[str] = ..., tls_ca_cert: _Optional[str] = ...) -> None: ...

class Lifecycle(_message.Message):
    __slots__ = ("auto_pause", "auto_resume", "auto_pause_mode")
    AUTO_PAUSE_FIELD_NUMBER: _ClassVar[int]
    AUTO_RESUME_FIELD_NUMBER: _ClassVar[int]
    AUTO_PAUSE_MODE_FIELD_NUMBER: _ClassVar[int]
    auto_pause: bool
    auto_resume: bool
    auto_pause_mode: PauseMode
    def __init__(self, auto_pause: _Optional[bool] = ..., auto_resume: _Optional[bool] = ..., auto_pause_mode: _Optional[_Union[PauseMode, str]] = ...) -> None: ...

class SandboxSpec(_message.Message):
    __slots__ = ("sandbox_id", "template_id", "resources", "env_vars", "metadata", "envd_access_token", "timeout_seconds", "network", "lifecycle", "traffic_access_token", "alias", "catalog_template_id", "owner_key_id", "volume_mounts", "lease_id", "trace_parent")
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
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ENVD_ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    CATALOG_TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    template_id: str
    resources: Resources
    env_vars: _containers.ScalarMap[str, str]
    metadata: _containers.ScalarMap[str, str]
    envd_access_token: str
    timeout_seconds: int
    network: NetworkPolicy
    lifecycle: Lifecycle
    traffic_access_token: str
    alias: str
    catalog_template_id: str
    owner_key_id: str
    volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    lease_id: str
    trace_parent: str
    def __init__(self, sandbox_id: _Optional[str] = ..., template_id: _Optional[str] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., envd_access_token: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., network: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[Lifecycle, _Mapping]] = ..., traffic_access_token: _Optional[str] = ..., alias: _Optional[str] = ..., catalog_template_id: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., volume_mounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., lease_id: _Optional[str] = ..., trace_parent: _Optional[str] = ...) -> None: ...

class VolumeMount(_message.Message):
    __slots__ = ("path", "volume_id", "name", "read_only", "ticket", "seen_as")
    PATH_FIELD_NUMBER: _ClassVar[int]
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    SEEN_AS_FIELD_NUMBER: _ClassVar[int]
    path: str
    volume_id: str
    name: str
    read_only: bool
    ticket: str
    seen_as: str
    def __init__(self, path: _Optional[str] = ..., volume_id: _Optional[str] = ..., name: _Optional[str] = ..., read_only: _Optional[bool] = ..., ticket: _Optional[str] = ..., seen_as: _Optional[str] = ...) -> None: ...

class SandboxRecord(_message.Message):
    __slots__ = ("sandbox_id", "node_id", "template_id", "state", "resources", "metadata", "started_at", "end_at", "envd_access_token", "envd_version", "alias", "network", "lifecycle", "env_vars", "traffic_access_token", "pause_mode", "paused_image", "base_template_id", "catalog_template_id", "envd_unresponsive_at_pause", "owner_key_id", "volume_mounts", "lease_id", "trace_parent", "death", "lease_on_expiry")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvVarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    END_AT_FIELD_NUMBER: _ClassVar[int]
    ENVD_ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ENVD_VERSION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    LIFECYCLE_FIELD_NUMBER: _ClassVar[int]
    ENV_VARS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_ACCESS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MODE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_IMAGE_FIELD_NUMBER: _ClassVar[int]
    BASE_TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    CATALOG_TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVD_UNRESPONSIVE_AT_PAUSE_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    DEATH_FIELD_NUMBER: _ClassVar[int]
    LEASE_ON_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    node_id: str
    template_id: str
    state: SandboxState
    resources: Resources
    metadata: _containers.ScalarMap[str, str]
    started_at: _timestamp_pb2.Timestamp
    end_at: _timestamp_pb2.Timestamp
    envd_access_token: str
    envd_version: str
    alias: str
    network: NetworkPolicy
    lifecycle: Lifecycle
    env_vars: _containers.ScalarMap[str, str]
    traffic_access_token: str
    pause_mode: PauseMode
    paused_image: str
    base_template_id: str
    catalog_template_id: str
    envd_unresponsive_at_pause: bool
    owner_key_id: str
    volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    lease_id: str
    trace_parent: str
    death: DeathCertificate
    lease_on_expiry: LeaseExpiryAction
    def __init__(self, sandbox_id: _Optional[str] = ..., node_id: _Optional[str] = ..., template_id: _Optional[str] = ..., state: _Optional[_Union[SandboxState, str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., envd_access_token: _Optional[str] = ..., envd_version: _Optional[str] = ..., alias: _Optional[str] = ..., network: _Optional[_Union[NetworkPolicy, _Mapping]] = ..., lifecycle: _Optional[_Union[Lifecycle, _Mapping]] = ..., env_vars: _Optional[_Mapping[str, str]] = ..., traffic_access_token: _Optional[str] = ..., pause_mode: _Optional[_Union[PauseMode, str]] = ..., paused_image: _Optional[str] = ..., base_template_id: _Optional[str] = ..., catalog_template_id: _Optional[str] = ..., envd_unresponsive_at_pause: _Optional[bool] = ..., owner_key_id: _Optional[str] = ..., volume_mounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ..., lease_id: _Optional[str] = ..., trace_parent: _Optional[str] = ..., death: _Optional[_Union[DeathCertificate, _Mapping]] = ..., lease_on_expiry: _Optional[_Union[LeaseExpiryAction, str]] = ...) -> None: ...

class NodeRecord(_message.Message):
    __slots__ = ("node_id", "nodeagent_address", "proxy_address", "capacity", "allocated", "sandbox_count", "cached_templates", "accelerator", "kernel_version", "heartbeat_time", "confinement", "memory_budget_mib", "memory_used_mib", "host_memory_available_mib", "pressure")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODEAGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROXY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_COUNT_FIELD_NUMBER: _ClassVar[int]
    CACHED_TEMPLATES_FIELD_NUMBER: _ClassVar[int]
    ACCELERATOR_FIELD_NUMBER: _ClassVar[int]
    KERNEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    CONFINEMENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUDGET_MIB_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_MIB_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_AVAILABLE_MIB_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    nodeagent_address: str
    proxy_address: str
    capacity: Resources
    allocated: Resources
    sandbox_count: int
    cached_templates: _containers.RepeatedScalarFieldContainer[str]
    accelerator: str
    kernel_version: str
    heartbeat_time: _timestamp_pb2.Timestamp
    confinement: str
    memory_budget_mib: int
    memory_used_mib: int
    host_memory_available_mib: int
    pressure: str
    def __init__(self, node_id: _Optional[str] = ..., nodeagent_address: _Optional[str] = ..., proxy_address: _Optional[str] = ..., capacity: _Optional[_Union[Resources, _Mapping]] = ..., allocated: _Optional[_Union[Resources, _Mapping]] = ..., sandbox_count: _Optional[int] = ..., cached_templates: _Optional[_Iterable[str]] = ..., accelerator: _Optional[str] = ..., kernel_version: _Optional[str] = ..., heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., confinement: _Optional[str] = ..., memory_budget_mib: _Optional[int] = ..., memory_used_mib: _Optional[int] = ..., host_memory_available_mib: _Optional[int] = ..., pressure: _Optional[str] = ...) -> None: ...

class TemplateRecord(_message.Message):
    __slots__ = ("template_id", "aliases", "default_resources", "envd_version", "created_at")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENVD_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    default_resources: Resources
    envd_version: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, template_id: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., default_resources: _Optional[_Union[Resources, _Mapping]] = ..., envd_version: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SnapshotRecord(_message.Message):
    __slots__ = ("snapshot_id", "node_id", "sandbox_id", "template_id", "names", "has_memory", "created_at", "resources", "persisted", "volume_mounts")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    HAS_MEMORY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_FIELD_NUMBER: _ClassVar[int]
    VOLUME_MOUNTS_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    node_id: str
    sandbox_id: str
    template_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    has_memory: bool
    created_at: _timestamp_pb2.Timestamp
    resources: Resources
    persisted: bool
    volume_mounts: _containers.RepeatedCompositeFieldContainer[VolumeMount]
    def __init__(self, snapshot_id: _Optional[str] = ..., node_id: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., template_id: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ..., has_memory: _Optional[bool] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., persisted: _Optional[bool] = ..., volume_mounts: _Optional[_Iterable[_Union[VolumeMount, _Mapping]]] = ...) -> None: ...

class VolumeRecord(_message.Message):
    __slots__ = ("volume_id", "name", "owner_key_id", "token", "quota_bytes", "created_at", "ephemeral_for_sandbox_id", "cloned_from")
    VOLUME_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FOR_SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CLONED_FROM_FIELD_NUMBER: _ClassVar[int]
    volume_id: str
    name: str
    owner_key_id: str
    token: str
    quota_bytes: int
    created_at: _timestamp_pb2.Timestamp
    ephemeral_for_sandbox_id: str
    cloned_from: str
    def __init__(self, volume_id: _Optional[str] = ..., name: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., token: _Optional[str] = ..., quota_bytes: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ephemeral_for_sandbox_id: _Optional[str] = ..., cloned_from: _Optional[str] = ...) -> None: ...

class CatalogTemplate(_message.Message):
    __slots__ = ("template_id", "names", "tags", "resources", "created_at", "updated_at", "build_count", "latest_build_id", "tag_images", "snapshot", "snapshot_ids")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class TagImagesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    BUILD_COUNT_FIELD_NUMBER: _ClassVar[int]
    LATEST_BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_IMAGES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_IDS_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    names: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.ScalarMap[str, str]
    resources: Resources
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    build_count: int
    latest_build_id: str
    tag_images: _containers.ScalarMap[str, str]
    snapshot: bool
    snapshot_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, template_id: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ..., tags: _Optional[_Mapping[str, str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., build_count: _Optional[int] = ..., latest_build_id: _Optional[str] = ..., tag_images: _Optional[_Mapping[str, str]] = ..., snapshot: _Optional[bool] = ..., snapshot_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CatalogClaim(_message.Message):
    __slots__ = ("holder_id",)
    HOLDER_ID_FIELD_NUMBER: _ClassVar[int]
    holder_id: str
    def __init__(self, holder_id: _Optional[str] = ...) -> None: ...

class BuildLogEntry(_message.Message):
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

class TemplateBuildRecord(_message.Message):
    __slots__ = ("build_id", "template_id", "status", "tags", "resources", "node_id", "logs", "reason", "reason_step", "created_at", "finished_at", "inputs_digest", "image_id", "envd_version", "updated_at", "min_free_disk_mib")
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_STEP_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    INPUTS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    ENVD_VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MIN_FREE_DISK_MIB_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    template_id: str
    status: BuildStatus
    tags: _containers.RepeatedScalarFieldContainer[str]
    resources: Resources
    node_id: str
    logs: _containers.RepeatedCompositeFieldContainer[BuildLogEntry]
    reason: str
    reason_step: str
    created_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    inputs_digest: str
    image_id: str
    envd_version: str
    updated_at: _timestamp_pb2.Timestamp
    min_free_disk_mib: int
    def __init__(self, build_id: _Optional[str] = ..., template_id: _Optional[str] = ..., status: _Optional[_Union[BuildStatus, str]] = ..., tags: _Optional[_Iterable[str]] = ..., resources: _Optional[_Union[Resources, _Mapping]] = ..., node_id: _Optional[str] = ..., logs: _Optional[_Iterable[_Union[BuildLogEntry, _Mapping]]] = ..., reason: _Optional[str] = ..., reason_step: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., inputs_digest: _Optional[str] = ..., image_id: _Optional[str] = ..., envd_version: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., min_free_disk_mib: _Optional[int] = ...) -> None: ...

class ApiKeyRecord(_message.Message):
    __slots__ = ("key_id", "name", "sha256", "created_at")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    name: str
    sha256: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, key_id: _Optional[str] = ..., name: _Optional[str] = ..., sha256: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SecretRecord(_message.Message):
    __slots__ = ("secret_id", "name", "owner_key_id", "current_version", "metadata", "created_at", "updated_at", "sealed_value")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SECRET_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    SEALED_VALUE_FIELD_NUMBER: _ClassVar[int]
    secret_id: str
    name: str
    owner_key_id: str
    current_version: int
    metadata: _containers.ScalarMap[str, str]
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    sealed_value: bytes
    def __init__(self, secret_id: _Optional[str] = ..., name: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., current_version: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sealed_value: _Optional[bytes] = ...) -> None: ...

class SandboxEvent(_message.Message):
    __slots__ = ("event_id", "sandbox_id", "type", "time", "node_id", "template_id", "metadata", "owner_key_id", "cause", "detail", "trace_id", "lease_id", "related_sandbox_ids")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RELATED_SANDBOX_IDS_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    sandbox_id: str
    type: SandboxEventType
    time: _timestamp_pb2.Timestamp
    node_id: str
    template_id: str
    metadata: _containers.ScalarMap[str, str]
    owner_key_id: str
    cause: DeathCause
    detail: str
    trace_id: str
    lease_id: str
    related_sandbox_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, event_id: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., type: _Optional[_Union[SandboxEventType, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node_id: _Optional[str] = ..., template_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., owner_key_id: _Optional[str] = ..., cause: _Optional[_Union[DeathCause, str]] = ..., detail: _Optional[str] = ..., trace_id: _Optional[str] = ..., lease_id: _Optional[str] = ..., related_sandbox_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeathCertificate(_message.Message):
    __slots__ = ("sandbox_id", "cause", "detail", "time", "node_id", "owner_key_id", "metadata", "template_id", "event_id")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    cause: DeathCause
    detail: str
    time: _timestamp_pb2.Timestamp
    node_id: str
    owner_key_id: str
    metadata: _containers.ScalarMap[str, str]
    template_id: str
    event_id: str
    def __init__(self, sandbox_id: _Optional[str] = ..., cause: _Optional[_Union[DeathCause, str]] = ..., detail: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node_id: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., template_id: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...

class LeaseRecord(_message.Message):
    __slots__ = ("lease_id", "owner_key_id", "name", "ttl_seconds", "on_expiry", "created_at", "metadata", "etcd_lease")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ON_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ETCD_LEASE_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    owner_key_id: str
    name: str
    ttl_seconds: int
    on_expiry: LeaseExpiryAction
    created_at: _timestamp_pb2.Timestamp
    metadata: _containers.ScalarMap[str, str]
    etcd_lease: int
    def __init__(self, lease_id: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., name: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., on_expiry: _Optional[_Union[LeaseExpiryAction, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., etcd_lease: _Optional[int] = ...) -> None: ...

class WebhookRecord(_message.Message):
    __slots__ = ("webhook_id", "owner_key_id", "name", "url", "enabled", "events", "sealed_signature_secret", "created_at", "updated_at", "cursor_event_id")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SEALED_SIGNATURE_SECRET_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    owner_key_id: str
    name: str
    url: str
    enabled: bool
    events: _containers.RepeatedScalarFieldContainer[str]
    sealed_signature_secret: bytes
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    cursor_event_id: str
    def __init__(self, webhook_id: _Optional[str] = ..., owner_key_id: _Optional[str] = ..., name: _Optional[str] = ..., url: _Optional[str] = ..., enabled: _Optional[bool] = ..., events: _Optional[_Iterable[str]] = ..., sealed_signature_secret: _Optional[bytes] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cursor_event_id: _Optional[str] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("webhook_id", "event_id", "attempts", "last_status", "last_error", "first_attempt_at", "last_attempt_at", "delivered", "gave_up")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    GAVE_UP_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    event_id: str
    attempts: int
    last_status: int
    last_error: str
    first_attempt_at: _timestamp_pb2.Timestamp
    last_attempt_at: _timestamp_pb2.Timestamp
    delivered: bool
    gave_up: bool
    def __init__(self, webhook_id: _Optional[str] = ..., event_id: _Optional[str] = ..., attempts: _Optional[int] = ..., last_status: _Optional[int] = ..., last_error: _Optional[str] = ..., first_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_attempt_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered: _Optional[bool] = ..., gave_up: _Optional[bool] = ...) -> None: ...
