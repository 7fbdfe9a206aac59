"""The gateway over snapstore's real VolumeService (its servicer and volume store on the
filesystem backend, in process): the unmodified e2b SDK's volume calls, a mount's ticket that
snapstore's own key verifies, and a copy-on-write fork whose clone holds the parent's files."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox, AsyncVolume

from aenv.snapstore.v1 import snapstore_pb2_grpc
from aenv_client import GatewayClient
from aenv_common.grpc_server import start_grpc_server
from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.volume_servicer import SERVICE_NAME, VolumeServicer
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.tickets import TicketKey

from .conftest import API_KEY, Stack, running_stack

pytestmark = pytest.mark.sdk


@contextlib.asynccontextmanager
async def real_stack(root: Path) -> AsyncIterator[tuple[Stack, TicketKey]]:
    store = VolumeStore(FsBackend(root / "backend"), root / "work",
                        default_quota_bytes=1 << 30, sync_interval_s=0.2)
    await store.start()
    key = TicketKey(os.urandom(32))
    servicer = VolumeServicer(store, key, nfs_address="127.0.0.1:2049",
                              default_quota_bytes=1 << 30)
    server, port = await start_grpc_server("127.0.0.1:0", [(
        snapstore_pb2_grpc.add_VolumeServiceServicer_to_server, servicer, SERVICE_NAME)])
    try:
        async with running_stack(snapstore_address=f"127.0.0.1:{port}",
                                 volume_sweep_grace_s=0.0) as stack:
            yield stack, key
    finally:
        await server.stop(None)
        await store.close()


@pytest.fixture
async def real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Stack, TicketKey]]:
    async with real_stack(tmp_path) as running:
        stack = running[0]
        for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"):
            monkeypatch.setenv(name, stack.url)
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        yield running


async def test_sdk_content_and_mounts_on_the_real_service(
    real: tuple[Stack, TicketKey]
) -> None:
    stack, key = real
    vol = await AsyncVolume.create("real")
    await vol.make_dir("/d", force=True)
    data = os.urandom(3 * (1 << 20) + 7)
    assert (await vol.write_file("/d/blob", io.BytesIO(data))).size == len(data)
    assert await vol.read_file("/d/blob", format="bytes") == data
    chunks = [c async for c in await vol.read_file("/d/blob", format="stream")]
    assert b"".join(chunks) == data
    assert [e.path for e in await vol.list("/d")] == ["/d/blob"]
    assert not await vol.exists("/missing")

    sbx = await AsyncSandbox.create("base", volume_mounts={"/data": vol})
    [mount] = stack.nodeagent.specs[-1].volume_mounts
    grant = key.verify(mount.ticket)
    assert (grant.sandbox_id, grant.volume_id, grant.seen_as, grant.read_only) == (
        sbx.sandbox_id, vol.volume_id, vol.volume_id, False)
    assert (await sbx.get_info()).volume_mounts == [{"name": "real", "path": "/data"}]

    async with GatewayClient(f"127.0.0.1:{stack.gateway.grpc_port}", API_KEY) as client:
        [child, _failed] = await client.fork_sandbox(sbx.sandbox_id, 2,
                                                     volume_mode="copy_on_write")
    assert not isinstance(child, Exception)
    [clone_mount] = child.volume_mounts
    assert clone_mount.volume_id != vol.volume_id
    clone = await AsyncVolume.connect(clone_mount.volume_id)
    assert await clone.read_file("/d/blob", format="bytes") == data  # the parent's, shared
    await clone.write_file("/d/blob", "changed in the child")
    assert await vol.read_file("/d/blob", format="bytes") == data  # the parent's unchanged

    await sbx.kill()
    await AsyncSandbox.kill(child.sandbox_id)
    assert await stack.gateway.sweep.sweep() == [clone_mount.volume_id]
    assert await AsyncVolume.destroy(vol.volume_id) is True
    assert await AsyncVolume.list() == []
