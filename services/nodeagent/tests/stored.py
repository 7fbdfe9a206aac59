"""What a snapstore holds, read by tests through its gRPC API."""

from __future__ import annotations

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import snapstore_stub


async def manifests(address: str) -> set[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await snapstore_stub(channel).ListManifests(pb.ListManifestsRequest())
    return set(reply.snapshot_ids)
