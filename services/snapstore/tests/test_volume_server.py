"""A whole snapstore serving volumes: the VolumeService beside SnapStoreService on one gRPC port,
the NFS server on its own (port 0 here), a ticket from GrantMount opening an NFS connection, the
volume metrics moving, everything closed on stop, and the ticket key and volumes surviving a
restart (fs backend and S3 on moto)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import RunningSnapstore, split_listen, start_snapstore
from aenv_testing.metrics import moved, scrape, value

from .nfs.nfs_client import RpcClient
from .nfs.nfs_ops import Ops
from .snapstore_harness import settings_for

VOL = "vol-cccccccccccccccccccc"


def volume_stub(channel: grpc.aio.Channel) -> Any:
    return pb_grpc.VolumeServiceStub(channel)  # type: ignore[no-untyped-call]


async def write(stub: Any, path: str, data: bytes) -> None:
    async def stream() -> Any:
        yield pb.WriteFileRequest(header=pb.WriteFileHeader(volume_id=VOL, path=path))
        yield pb.WriteFileRequest(data=data)
        yield pb.WriteFileRequest(end=True)

    await stub.WriteFile(stream())


async def nfs_read(running: RunningSnapstore, ticket: str, name: str) -> bytes:
    """`name` in the volume's root, read over NFS through a connection opened with `ticket`."""
    client = await RpcClient.connect(split_listen(running.nfs_bound),
                                     f"AENV-VOLUMES 1 {ticket}\n".encode())
    try:
        ops = Ops(client)
        root = await client.mount(f"/{VOL}")
        status, handle, _attr = await ops.lookup(root, name)
        assert status == 0 and handle is not None
        status, data, eof = await ops.read(handle, 0, 1 << 20)
        assert status == 0 and eof
        return data
    finally:
        await client.close()


async def test_volumes_served_over_grpc_and_nfs(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = settings_for("fs", tmp_path, request)
    settings.metrics_listen = "127.0.0.1:0"
    running = await start_snapstore(settings)
    host, port = split_listen(running.nfs_bound)
    try:
        assert (host, port != 0) == ("127.0.0.1", True)
        assert running.nfs_address == running.nfs_bound  # advertised: the bound address
        assert running.metrics is not None
        url = f"http://127.0.0.1:{running.metrics.port}/metrics"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = volume_stub(channel)
            endpoint = await stub.GetVolumeEndpoint(pb.GetVolumeEndpointRequest())
            assert endpoint.nfs_address == running.nfs_address
            created = await stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL))
            assert created.quota_bytes == settings.volume_default_quota_bytes == 10 << 30
            before = await asyncio.to_thread(scrape, url)
            await write(stub, "/hello", b"hello over nfs")
            grant = await stub.GrantMount(pb.GrantMountRequest(sandbox_id="sbx-1", volume_id=VOL))
            assert await nfs_read(running, grant.ticket, "hello") == b"hello over nfs"
            after = await asyncio.to_thread(scrape, url)
    finally:
        await running.stop(grace=0)

    assert moved(before, after, "aenv_snapstore_volume_bytes_written_total", via="api") == 14
    assert moved(before, after, "aenv_snapstore_volume_bytes_read_total", via="nfs") == 14
    assert moved(before, after, "aenv_snapstore_nfs_ops_total",
                 procedure="nfs.READ", status="ok") == 1
    assert moved(before, after, "aenv_snapstore_nfs_ops_total",
                 procedure="mount.MNT", status="-") == 1
    assert value(after, "aenv_snapstore_volumes_open") >= 1
    assert moved(before, after, "aenv_snapstore_volume_chunk_bytes_written_total") > 0
    assert moved(before, after, "aenv_grpc_requests_total",
                 method="/aenv.snapstore.v1.VolumeService/WriteFile", code="OK") == 1
    # Stopped: nothing listens on the NFS port any more.
    with pytest.raises(OSError):
        await asyncio.open_connection(host, port)


@pytest.mark.parametrize("kind", ["fs", pytest.param("s3", marks=pytest.mark.s3)])
async def test_tickets_and_volumes_outlive_a_restart(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = settings_for(kind, tmp_path, request)
    first = await start_snapstore(settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{first.port}") as channel:
            stub = volume_stub(channel)
            await stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL, quota_bytes=1 << 20))
            await write(stub, "/kept", b"before the restart")
            ticket = (await stub.GrantMount(pb.GrantMountRequest(
                sandbox_id="sbx-1", volume_id=VOL, read_only=True))).ticket
    finally:
        await first.stop(grace=0)

    again = SnapstoreSettings(**{**settings.model_dump(), "volume_work_dir": tmp_path / "new",
                                 "volume_nfs_advertise": "snapstore.example:2049"})
    second = await start_snapstore(again)
    try:
        assert second.nfs_address == "snapstore.example:2049"
        assert await nfs_read(second, ticket, "kept") == b"before the restart"
        async with grpc.aio.insecure_channel(f"127.0.0.1:{second.port}") as channel:
            stub = volume_stub(channel)
            endpoint = await stub.GetVolumeEndpoint(pb.GetVolumeEndpointRequest())
            assert endpoint.nfs_address == "snapstore.example:2049"
            usage = await stub.GetVolumeUsage(pb.GetVolumeUsageRequest(volume_id=VOL))
            assert (usage.used_bytes, usage.quota_bytes) == (18, 1 << 20)
    finally:
        await second.stop(grace=0)

