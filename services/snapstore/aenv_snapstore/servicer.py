"""The SnapStoreService gRPC servicer: a thin mapping of RPCs onto SnapStore."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_snapstore import metrics
from aenv_snapstore.store import SnapStore

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SnapStoreService"].full_name


class SnapStoreServicer(pb_grpc.SnapStoreServiceServicer):
    def __init__(self, store: SnapStore) -> None:
        self._store = store

    async def FindMissingChunks(
        self, request: pb.FindMissingChunksRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindMissingChunksResponse:
        missing = await self._store.find_missing(request.digests)
        # A pusher's question (a manifest's check of its chunks is not counted).
        metrics.CHUNKS_PRESENT.inc(len(set(request.digests)) - len(missing))
        metrics.CHUNKS_MISSING.inc(len(missing))
        return pb.FindMissingChunksResponse(digests=missing)

    async def PutChunks(
        self,
        request_iterator: AsyncIterable[pb.PutChunksRequest],
        context: grpc.aio.ServicerContext,
    ) -> pb.PutChunksResponse:
        async def chunks() -> AsyncIterator[pb.Chunk]:
            async for request in request_iterator:
                yield request.chunk

        stored, stored_bytes = await self._store.put_chunks(chunks())
        return pb.PutChunksResponse(stored=stored, stored_bytes=stored_bytes)

    async def GetChunks(
        self, request: pb.GetChunksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetChunksResponse]:
        async for chunk in self._store.iter_chunks(request.digests):
            yield pb.GetChunksResponse(chunk=chunk)

    async def PutManifest(
        self, request: pb.PutManifestRequest, context: grpc.aio.ServicerContext
    ) -> pb.PutManifestResponse:
        await self._store.put_manifest(request.manifest)
        return pb.PutManifestResponse()

    async def GetManifest(
        self, request: pb.GetManifestRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetManifestResponse:
        return pb.GetManifestResponse(manifest=await self._store.get_manifest(request.snapshot_id))

    async def ListManifests(
        self, request: pb.ListManifestsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListManifestsResponse:
        return pb.ListManifestsResponse(snapshot_ids=await self._store.list_manifests())

    async def DeleteManifest(
        self, request: pb.DeleteManifestRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteManifestResponse:
        await self._store.delete_manifest(request.snapshot_id)
        return pb.DeleteManifestResponse()

    async def CollectGarbage(
        self, request: pb.CollectGarbageRequest, context: grpc.aio.ServicerContext
    ) -> pb.CollectGarbageResponse:
        grace = float(request.grace_seconds) if request.HasField("grace_seconds") else None
        stats = await self._store.collect_garbage(grace)
        return pb.CollectGarbageResponse(
            deleted_chunks=stats.deleted_chunks,
            deleted_bytes=stats.deleted_bytes,
            kept_chunks=stats.kept_chunks,
        )
