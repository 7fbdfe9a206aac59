"""A fake snapstore VolumeService: real grpc.aio servicer over an in-memory tree per volume,
answering the codes the proto documents (NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
RESOURCE_EXHAUSTED, INVALID_ARGUMENT), streaming reads in 1 MiB messages and replacing a
written file only when its stream ends whole."""

from __future__ import annotations

import posixpath
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.errors import (
    AenvError,
    AlreadyExists,
    Conflict,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)

DEFAULT_QUOTA = 10 << 30
MESSAGE = 1 << 20


@dataclass
class Node:
    kind: int
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime_ns: int = field(default_factory=time.time_ns)


@dataclass
class FakeVolume:
    quota: int
    tree: dict[str, Node] = field(default_factory=dict)

    def used(self) -> int:
        return sum(len(n.data) for n in self.tree.values())


def _dir() -> Node:
    return Node(pb.VOLUME_ENTRY_TYPE_DIRECTORY, mode=0o755)


class FakeVolumeService(pb_grpc.VolumeServiceServicer):
    def __init__(self) -> None:
        self.volumes: dict[str, FakeVolume] = {}
        self.grants: list[pb.GrantMountRequest] = []
        self.calls: list[str] = []
        # Errors the next calls of a method raise, one each ("CreateVolume", "CloneVolume", ...).
        self.failures: dict[str, list[AenvError]] = {}

    def _called(self, method: str) -> None:
        self.calls.append(method)
        if self.failures.get(method):
            raise self.failures[method].pop(0)

    def _volume(self, volume_id: str) -> FakeVolume:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise NotFound(f"volume {volume_id} not found")
        return volume

    @staticmethod
    def _path(path: str) -> str:
        if not path.startswith("/") or ".." in path.split("/"):
            raise InvalidArgument(f"path {path!r} must be absolute, without '..'")
        return posixpath.normpath(path) if path != "/" else "/"

    def _node(self, volume: FakeVolume, path: str) -> Node:
        node = volume.tree.get(self._path(path))
        if node is None:
            raise NotFound(f"path {path} not found")
        return node

    def _parent(self, volume: FakeVolume, path: str, force: bool) -> None:
        parent = posixpath.dirname(path)
        if force:
            while parent not in volume.tree:
                volume.tree[parent] = _dir()
                parent = posixpath.dirname(parent)
        node = volume.tree.get(parent)
        if node is None:
            raise NotFound(f"path {parent} not found")
        if node.kind != pb.VOLUME_ENTRY_TYPE_DIRECTORY:
            raise Conflict(f"{parent} is not a directory")

    @staticmethod
    def _entry(path: str, node: Node) -> pb.VolumeEntry:
        return pb.VolumeEntry(
            name=posixpath.basename(path) or "/", path=path, type=node.kind,  # type: ignore[arg-type]
            size=len(node.data), mode=node.mode, uid=node.uid, gid=node.gid,
            atime_ns=node.mtime_ns, mtime_ns=node.mtime_ns, ctime_ns=node.mtime_ns)

    async def CreateVolume(
        self, request: pb.CreateVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateVolumeResponse:
        self._called("CreateVolume")
        if request.volume_id in self.volumes:
            raise AlreadyExists(f"volume {request.volume_id} exists")
        quota = request.quota_bytes or DEFAULT_QUOTA
        self.volumes[request.volume_id] = FakeVolume(quota, {"/": _dir()})
        return pb.CreateVolumeResponse(quota_bytes=quota)

    async def DestroyVolume(
        self, request: pb.DestroyVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DestroyVolumeResponse:
        self._called("DestroyVolume")
        self.volumes.pop(request.volume_id, None)
        return pb.DestroyVolumeResponse()

    async def CloneVolume(
        self, request: pb.CloneVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloneVolumeResponse:
        self._called("CloneVolume")
        source = self._volume(request.source_id)
        if request.volume_id in self.volumes:
            raise AlreadyExists(f"volume {request.volume_id} exists")
        self.volumes[request.volume_id] = FakeVolume(source.quota, {
            path: Node(n.kind, n.data, n.mode, n.uid, n.gid, n.mtime_ns)
            for path, n in source.tree.items()})
        return pb.CloneVolumeResponse()

    async def GetVolumeUsage(
        self, request: pb.GetVolumeUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetVolumeUsageResponse:
        volume = self._volume(request.volume_id)
        return pb.GetVolumeUsageResponse(used_bytes=volume.used(), quota_bytes=volume.quota,
                                         files=len(volume.tree))

    async def GrantMount(
        self, request: pb.GrantMountRequest, context: grpc.aio.ServicerContext
    ) -> pb.GrantMountResponse:
        self._called("GrantMount")
        self._volume(request.volume_id)
        self.grants.append(request)
        seen_as = request.seen_as or request.volume_id
        return pb.GrantMountResponse(ticket=f"t.{request.sandbox_id}.{request.volume_id}."
                                            f"{seen_as}.{int(request.read_only)}")

    async def GetVolumeEndpoint(
        self, request: pb.GetVolumeEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetVolumeEndpointResponse:
        return pb.GetVolumeEndpointResponse(nfs_address="127.0.0.1:2049")

    async def StatPath(
        self, request: pb.StatPathRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatPathResponse:
        volume = self._volume(request.volume_id)
        path = self._path(request.path)
        return pb.StatPathResponse(entry=self._entry(path, self._node(volume, path)))

    async def ListDir(
        self, request: pb.ListDirRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDirResponse:
        volume = self._volume(request.volume_id)
        base = self._path(request.path)
        if self._node(volume, base).kind != pb.VOLUME_ENTRY_TYPE_DIRECTORY:
            raise Conflict(f"{base} is not a directory")
        depth = max(request.depth, 1)
        prefix = base.rstrip("/") + "/"
        entries = [self._entry(p, n) for p, n in sorted(volume.tree.items())
                   if p.startswith(prefix) and p != base
                   and p[len(prefix):].count("/") < depth]
        return pb.ListDirResponse(entries=entries)

    async def MakeDir(
        self, request: pb.MakeDirRequest, context: grpc.aio.ServicerContext
    ) -> pb.MakeDirResponse:
        volume = self._volume(request.volume_id)
        path = self._path(request.path)
        if path in volume.tree:
            if request.force and volume.tree[path].kind == pb.VOLUME_ENTRY_TYPE_DIRECTORY:
                return pb.MakeDirResponse(entry=self._entry(path, volume.tree[path]))
            raise AlreadyExists(f"{path} exists")
        self._parent(volume, path, request.force)
        node = _dir()
        if request.HasField("mode"):
            node.mode = request.mode
        node.uid, node.gid = request.uid, request.gid
        volume.tree[path] = node
        return pb.MakeDirResponse(entry=self._entry(path, node))

    async def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateMetadataResponse:
        volume = self._volume(request.volume_id)
        path = self._path(request.path)
        node = self._node(volume, path)
        for name in ("uid", "gid", "mode"):
            if request.HasField(name):
                setattr(node, name, getattr(request, name))
        return pb.UpdateMetadataResponse(entry=self._entry(path, node))

    async def RemovePath(
        self, request: pb.RemovePathRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemovePathResponse:
        volume = self._volume(request.volume_id)
        path = self._path(request.path)
        self._node(volume, path)
        for name in [p for p in volume.tree if p == path or p.startswith(path + "/")]:
            del volume.tree[name]
        return pb.RemovePathResponse()

    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadFileResponse]:
        volume = self._volume(request.volume_id)
        node = self._node(volume, request.path)
        if node.kind == pb.VOLUME_ENTRY_TYPE_DIRECTORY:
            raise Conflict(f"{request.path} is a directory")
        for start in range(0, len(node.data), MESSAGE):
            yield pb.ReadFileResponse(data=node.data[start:start + MESSAGE])

    async def WriteFile(
        self, requests: AsyncIterator[pb.WriteFileRequest], context: grpc.aio.ServicerContext
    ) -> pb.WriteFileResponse:
        first = await anext(aiter(requests))
        header = first.header
        volume = self._volume(header.volume_id)
        path = self._path(header.path)
        self._parent(volume, path, header.force)
        old = volume.tree.get(path)
        if old is not None and old.kind == pb.VOLUME_ENTRY_TYPE_DIRECTORY:
            raise Conflict(f"{path} is a directory")
        data = bytearray()
        budget = volume.quota - volume.used() + (len(old.data) if old else 0)
        ended = False
        async for message in requests:
            if message.HasField("end"):
                ended = True
                continue
            if len(message.data) > MESSAGE:
                raise InvalidArgument("a message over 1 MiB")
            data += message.data
            if len(data) > budget:
                raise ResourceExhausted("volume quota exceeded")
        if not ended:  # as snapstore: an upload without its end marker replaces nothing
            raise InvalidArgument("the WriteFile stream ended before its end marker")
        node = Node(pb.VOLUME_ENTRY_TYPE_FILE, bytes(data))
        for name in ("uid", "gid", "mode"):
            if header.HasField(name):
                setattr(node, name, getattr(header, name))
        volume.tree[path] = node
        return pb.WriteFileResponse(entry=self._entry(path, node))
