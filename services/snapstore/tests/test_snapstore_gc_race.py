"""Garbage collection racing an upload: a chunk the pusher was told is stored (so it does not send
it) is one its manifest will reference; collection must keep it, however old and unreferenced it
is, or the manifest is refused (or, with a stale presence cache, written over a missing chunk)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import pull_files, push_files, snapstore_stub
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore

from .snapstore_harness import write_pattern

MIB = 1 << 20


class GcBeforeManifest:
    """The stub, but every PutManifest first runs a garbage collection: one lands between a
    push's question (which chunks are missing) and its manifest."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.collected: list[pb.CollectGarbageResponse] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def PutManifest(self, request: pb.PutManifestRequest) -> pb.PutManifestResponse:
        self.collected.append(await self._stub.CollectGarbage(pb.CollectGarbageRequest()))
        response: pb.PutManifestResponse = await self._stub.PutManifest(request)
        return response


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[Any]:
    running = await start_snapstore(
        SnapstoreSettings(
            listen="127.0.0.1:0",
            gc_interval_seconds=0,
            gc_grace_seconds=3600,
            fs_root=tmp_path / "store",
            volume_nfs_listen="127.0.0.1:0",
            volume_work_dir=tmp_path / "volumes",
        )
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            yield snapstore_stub(channel)
    finally:
        await running.stop(grace=0)


async def test_gc_keeps_the_chunks_an_upload_was_told_are_stored(stub: Any, tmp_path: Path) -> None:
    # An earlier snapshot's chunks, its manifest deleted since, long past the grace period.
    old = write_pattern(tmp_path / "old", 2 * MIB, seed=1)
    await push_files(stub, "earlier", "", {"memory": tmp_path / "old"})
    await stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id="earlier"))
    hours_ago = time.time() - 7200
    for chunk in (tmp_path / "store" / "chunks").rglob("*"):
        os.utime(chunk, (hours_ago, hours_ago))

    # A push that shares that chunk, collection running before its manifest.
    (tmp_path / "new").write_bytes(old + write_pattern(tmp_path / "tail", 2 * MIB, seed=2))
    racing = GcBeforeManifest(stub)
    stats = await push_files(racing, "later", "", {"memory": tmp_path / "new"})

    assert stats.sent_chunks == 1  # the shared chunk was not sent again
    assert racing.collected[0].deleted_chunks == 0
    pulled = await pull_files(stub, "later", tmp_path / "out")
    assert pulled["memory"].read_bytes() == (tmp_path / "new").read_bytes()
    # With nothing referencing or claiming them, the same chunks do go.
    await stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id="later"))
    collected = await stub.CollectGarbage(pb.CollectGarbageRequest(grace_seconds=0))
    assert collected.deleted_chunks == 1  # the new chunk; the claimed one stays its grace
