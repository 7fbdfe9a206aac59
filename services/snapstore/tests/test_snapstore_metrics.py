"""The snapstore's `/metrics`: chunk bytes stored and served, and the chunks a push did not
send again, moving with real pushes and pulls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from aenv_common.snapshots import pull_files, push_files, snapstore_stub
from aenv_snapstore.server import start_snapstore
from aenv_testing.metrics import moved, scrape

from .snapstore_harness import settings_for, write_pattern

CHUNK = 64 * 1024


async def test_pushes_and_pulls_move_the_byte_counters(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = settings_for("fs", tmp_path, request)
    settings.metrics_listen = "127.0.0.1:0"
    running = await start_snapstore(settings)
    assert running.metrics is not None
    url = f"http://127.0.0.1:{running.metrics.port}/metrics"
    mem = tmp_path / "mem"
    write_pattern(mem, 4 * CHUNK)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = snapstore_stub(channel)
            before = await asyncio.to_thread(scrape, url)
            first = await push_files(stub, "a", "", {"memory": mem}, chunk_size=CHUNK)
            await push_files(stub, "b", "", {"memory": mem}, chunk_size=CHUNK)  # asks, sends none
            await pull_files(stub, "a", tmp_path / "out")
            after = await asyncio.to_thread(scrape, url)
    finally:
        await running.stop(grace=0)

    stored = first.sent_compressed_bytes  # chunks are kept as sent
    assert moved(before, after, "aenv_snapstore_chunks_written_total") == 4
    assert moved(before, after, "aenv_snapstore_chunk_bytes_written_total") == stored
    assert moved(before, after, "aenv_snapstore_chunk_bytes_uncompressed_written_total") == (
        4 * CHUNK)
    assert moved(before, after, "aenv_snapstore_chunks_present_total") == 4  # the second push
    assert moved(before, after, "aenv_snapstore_chunks_read_total") == 4
    assert moved(before, after, "aenv_snapstore_chunk_bytes_read_total") == stored
    assert moved(before, after, "aenv_grpc_requests_total",
                 method="/aenv.snapstore.v1.SnapStoreService/PutManifest", code="OK") == 2
