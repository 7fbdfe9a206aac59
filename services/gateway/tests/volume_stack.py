"""A gateway stack with a fake snapstore VolumeService (volume_fakes.py) behind it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aenv.snapstore.v1 import snapstore_pb2_grpc
from aenv_common.grpc_server import start_grpc_server

from .conftest import Stack, running_stack
from .volume_fakes import FakeVolumeService


@dataclass
class VolumeStack:
    stack: Stack
    snapstore: FakeVolumeService

    @property
    def url(self) -> str:
        return self.stack.url

    def records(self) -> dict[str, Any]:
        """The volume records the gateway keeps (in memory here)."""
        return dict(self.stack.gateway.volumes._records.records)  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def volume_stack(**settings: Any) -> AsyncIterator[VolumeStack]:
    fake = FakeVolumeService()
    server, port = await start_grpc_server("127.0.0.1:0", [(
        snapstore_pb2_grpc.add_VolumeServiceServicer_to_server, fake,
        "aenv.snapstore.v1.VolumeService")])
    try:
        async with running_stack(snapstore_address=f"127.0.0.1:{port}", **settings) as stack:
            yield VolumeStack(stack, fake)
    finally:
        await server.stop(None)
