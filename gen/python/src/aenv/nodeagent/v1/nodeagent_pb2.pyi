from aenv.cluster.v1 import cluster_pb2 as _cluster_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

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
    __slots__ = ("sandbox_id",)
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    def __init__(self, sandbox_id: _Optional[str] = ...) -> None: ...

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

class GetNodeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeInfoResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _cluster_pb2.NodeRecord
    def __init__(self, node: _Optional[_Union[_cluster_pb2.NodeRecord, _Mapping]] = ...) -> None: ...
