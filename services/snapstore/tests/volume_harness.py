"""The VolumeService on a real grpc.aio server over a volume store: the in-memory fake, or the
real store on the fs backend or on S3 (moto)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.grpc_server import start_grpc_server
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.server import open_backend
from aenv_snapstore.volume_servicer import SERVICE_NAME, VolumeServicer
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.tickets import TicketKey

from .snapstore_harness import settings_for
from .volume_fake import FakeVolumeStore

DEFAULT_QUOTA = 64 << 20
NFS_ADDRESS = "10.1.2.3:2049"


@dataclass
class VolumeHarness:
    stub: Any  # VolumeServiceStub
    store: Any  # the store the server serves, for direct inspection
    key: TicketKey
    real: bool
    default_quota: int = DEFAULT_QUOTA
    nfs_address: str = NFS_ADDRESS


async def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest
                 ) -> tuple[Any, Backend | None]:
    if kind == "fake":
        return FakeVolumeStore(), None
    settings = settings_for(kind, tmp_path, request)
    backend = await open_backend(settings)
    store = VolumeStore(backend, tmp_path / "work", default_quota_bytes=DEFAULT_QUOTA)
    await store.start()
    return store, backend


@pytest.fixture(name="volume_harness",
                params=["fake", "fs", pytest.param("s3", marks=pytest.mark.s3)])
async def volume_harness_fixture(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[VolumeHarness]:
    store, backend = await _store(request.param, tmp_path, request)
    key = TicketKey(b"t" * 32)
    servicer = VolumeServicer(store, key, nfs_address=NFS_ADDRESS,
                              default_quota_bytes=DEFAULT_QUOTA)
    server, port = await start_grpc_server(
        "127.0.0.1:0", [(pb_grpc.add_VolumeServiceServicer_to_server, servicer, SERVICE_NAME)])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.VolumeServiceStub(channel)  # type: ignore[no-untyped-call]
            yield VolumeHarness(stub, store, key, real=request.param != "fake")
    finally:
        await server.stop(grace=0)
        await store.close()
        if backend is not None:
            await backend.close()
