"""Snapstore's VolumeService as the gateway calls it: typed errors back (clients.call), a
deadline on every unary call, streams without one (a file may take hours to move)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.status_tables import from_rpc_error
from aenv_gateway.cluster.clients import call


class VolumeClient:
    def __init__(self, channel: grpc.aio.Channel, deadline_s: float) -> None:
        self._stub: Any = pb_grpc.VolumeServiceStub(channel)  # type: ignore[no-untyped-call]
        self._deadline = deadline_s

    async def _unary(self, method: str, request: Any) -> Any:
        rpc = getattr(self._stub, method)
        return await call(lambda: rpc(request, timeout=self._deadline))

    async def create(self, volume_id: str, quota_bytes: int) -> int:
        reply = await self._unary("CreateVolume", pb.CreateVolumeRequest(
            volume_id=volume_id, quota_bytes=quota_bytes))
        return int(reply.quota_bytes)

    async def destroy(self, volume_id: str) -> None:
        await self._unary("DestroyVolume", pb.DestroyVolumeRequest(volume_id=volume_id))

    async def clone(self, source_id: str, volume_id: str) -> None:
        await self._unary("CloneVolume", pb.CloneVolumeRequest(
            source_id=source_id, volume_id=volume_id))

    async def grant(self, sandbox_id: str, volume_id: str, seen_as: str, read_only: bool) -> str:
        """The ticket (a secret: never logged) letting `sandbox_id`'s relay mount it."""
        reply = await self._unary("GrantMount", pb.GrantMountRequest(
            sandbox_id=sandbox_id, volume_id=volume_id, seen_as=seen_as, read_only=read_only))
        return str(reply.ticket)

    async def stat(self, volume_id: str, path: str) -> pb.VolumeEntry:
        reply: pb.StatPathResponse = await self._unary(
            "StatPath", pb.StatPathRequest(volume_id=volume_id, path=path))
        return reply.entry

    async def list_dir(self, volume_id: str, path: str, depth: int) -> list[pb.VolumeEntry]:
        reply = await self._unary(
            "ListDir", pb.ListDirRequest(volume_id=volume_id, path=path, depth=depth))
        return list(reply.entries)

    async def make_dir(self, request: pb.MakeDirRequest) -> pb.VolumeEntry:
        reply: pb.MakeDirResponse = await self._unary("MakeDir", request)
        return reply.entry

    async def update_metadata(self, request: pb.UpdateMetadataRequest) -> pb.VolumeEntry:
        reply: pb.UpdateMetadataResponse = await self._unary("UpdateMetadata", request)
        return reply.entry

    async def remove(self, volume_id: str, path: str) -> None:
        await self._unary("RemovePath", pb.RemovePathRequest(volume_id=volume_id, path=path))

    async def read(self, volume_id: str, path: str) -> AsyncGenerator[bytes, None]:
        """The file's bytes as snapstore sends them (messages of at most 1 MiB); ending early
        cancels the call."""
        stream = self._stub.ReadFile(pb.ReadFileRequest(volume_id=volume_id, path=path))
        try:
            async for message in stream:
                yield message.data
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        finally:
            stream.cancel()

    async def write(
        self, header: pb.WriteFileHeader, chunks: AsyncIterator[bytes]
    ) -> pb.VolumeEntry:
        """Streams `chunks` into the file named by `header`; snapstore replaces the file only
        once the end marker follows the last chunk."""

        async def messages() -> AsyncIterator[pb.WriteFileRequest]:
            yield pb.WriteFileRequest(header=header)
            async for chunk in chunks:
                if chunk:
                    yield pb.WriteFileRequest(data=chunk)
            yield pb.WriteFileRequest(end=True)

        rpc = self._stub.WriteFile
        reply: pb.WriteFileResponse = await call(lambda: rpc(messages()))
        return reply.entry
