"""The VolumeService gRPC servicer: volumes' lifecycle, mount tickets, the NFS endpoint, and the
content calls (in `volume_content`). Typed errors (the volume store's included) become gRPC
statuses in the shared interceptor, as for SnapStoreService."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.errors import InvalidArgument
from aenv_snapstore import volume_content as content
from aenv_snapstore.volumes.errors import VolumeNotFound
from aenv_snapstore.volumes.model import is_volume_id
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.tickets import Grant, TicketKey
from aenv_snapstore.volumes.volume import Volume

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["VolumeService"].full_name


def check_volume_id(what: str, volume_id: str) -> str:
    """`volume_id`, when it is one (the store's rule), else INVALID_ARGUMENT naming `what`."""
    if not is_volume_id(volume_id):
        raise InvalidArgument(f"{what} {volume_id[:64]!r} is not a volume id")
    return volume_id


class VolumeServicer(pb_grpc.VolumeServiceServicer):
    def __init__(
        self, store: VolumeStore, tickets: TicketKey, *, nfs_address: str,
        default_quota_bytes: int,
    ) -> None:
        self._store = store
        self._tickets = tickets
        self._nfs_address = nfs_address
        self._default_quota = default_quota_bytes

    async def _open(self, volume_id: str) -> Volume:
        return await self._store.open(check_volume_id("volume", volume_id))

    async def CreateVolume(
        self, request: pb.CreateVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateVolumeResponse:
        volume_id = check_volume_id("volume", request.volume_id)
        quota = await self._store.create(volume_id, request.quota_bytes or self._default_quota)
        return pb.CreateVolumeResponse(quota_bytes=quota)

    async def DestroyVolume(
        self, request: pb.DestroyVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DestroyVolumeResponse:
        await self._store.destroy(check_volume_id("volume", request.volume_id))
        return pb.DestroyVolumeResponse()

    async def CloneVolume(
        self, request: pb.CloneVolumeRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloneVolumeResponse:
        await self._store.clone(check_volume_id("source volume", request.source_id),
                                check_volume_id("volume", request.volume_id))
        return pb.CloneVolumeResponse()

    async def GetVolumeUsage(
        self, request: pb.GetVolumeUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetVolumeUsageResponse:
        usage = await self._store.usage(check_volume_id("volume", request.volume_id))
        return pb.GetVolumeUsageResponse(
            used_bytes=usage.used_bytes, quota_bytes=usage.quota_bytes, files=usage.files)

    async def GrantMount(
        self, request: pb.GrantMountRequest, context: grpc.aio.ServicerContext
    ) -> pb.GrantMountResponse:
        """A ticket for an existing volume (NOT_FOUND otherwise): a mount of a volume that does
        not exist fails here, at create, not later in the guest."""
        if not request.sandbox_id:
            raise InvalidArgument("a mount grant needs the sandbox id")
        volume_id = check_volume_id("volume", request.volume_id)
        seen_as = check_volume_id("seen_as", request.seen_as or volume_id)
        if not await self._store.exists(volume_id):
            raise VolumeNotFound(f"volume {volume_id} not found")
        grant = Grant(request.sandbox_id, volume_id, seen_as, request.read_only)
        return pb.GrantMountResponse(ticket=self._tickets.mint(grant))

    async def GetVolumeEndpoint(
        self, request: pb.GetVolumeEndpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetVolumeEndpointResponse:
        return pb.GetVolumeEndpointResponse(nfs_address=self._nfs_address)

    async def StatPath(
        self, request: pb.StatPathRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatPathResponse:
        volume = await self._open(request.volume_id)
        return pb.StatPathResponse(entry=await content.stat_path(volume, request.path))

    async def ListDir(
        self, request: pb.ListDirRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDirResponse:
        volume = await self._open(request.volume_id)
        return pb.ListDirResponse(
            entries=await content.list_dir(volume, request.path, request.depth))

    async def MakeDir(
        self, request: pb.MakeDirRequest, context: grpc.aio.ServicerContext
    ) -> pb.MakeDirResponse:
        volume = await self._open(request.volume_id)
        return pb.MakeDirResponse(entry=await content.make_dir(volume, request))

    async def UpdateMetadata(
        self, request: pb.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateMetadataResponse:
        volume = await self._open(request.volume_id)
        return pb.UpdateMetadataResponse(entry=await content.update_metadata(volume, request))

    async def RemovePath(
        self, request: pb.RemovePathRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemovePathResponse:
        await content.remove_path(await self._open(request.volume_id), request.path)
        return pb.RemovePathResponse()

    async def ReadFile(
        self, request: pb.ReadFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadFileResponse]:
        volume = await self._open(request.volume_id)
        async for data in content.read_file(volume, request.path):
            yield pb.ReadFileResponse(data=data)

    async def WriteFile(
        self,
        request_iterator: AsyncIterable[pb.WriteFileRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.WriteFileResponse:
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None or not first.HasField("header"):
            raise InvalidArgument("the first WriteFile message must be the header")
        volume = await self._open(first.header.volume_id)
        return pb.WriteFileResponse(entry=await content.write_file(volume, first.header, requests))
