from aenv.cluster.v1 import cluster_pb2 as _cluster_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScheduleRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _cluster_pb2.SandboxSpec
    def __init__(self, spec: _Optional[_Union[_cluster_pb2.SandboxSpec, _Mapping]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("node_id", "nodeagent_address", "proxy_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    NODEAGENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROXY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    nodeagent_address: str
    proxy_address: str
    def __init__(self, node_id: _Optional[str] = ..., nodeagent_address: _Optional[str] = ..., proxy_address: _Optional[str] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("placement",)
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    placement: Placement
    def __init__(self, placement: _Optional[_Union[Placement, _Mapping]] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("sandbox_id", "node_id", "resources", "expires_at_unix_ms")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    node_id: str
    resources: _cluster_pb2.Resources
    expires_at_unix_ms: int
    def __init__(self, sandbox_id: _Optional[str] = ..., node_id: _Optional[str] = ..., resources: _Optional[_Union[_cluster_pb2.Resources, _Mapping]] = ..., expires_at_unix_ms: _Optional[int] = ...) -> None: ...
