"""Push and pull through a real snapstore gRPC server, on the fs backend and on moto S3."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zstandard

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import AlreadyExists, Conflict, Internal, InvalidArgument, NotFound
from aenv_common.snapshots import ZERO_CHUNK, pull_files, push_files
from aenv_common.snapshots._rpc import typed_rpc_errors
from aenv_common.snapshots.codec import compress, digest_of
from aenv_common.snapshots.contexts import pull_context, push_context
from aenv_snapstore.store import CHUNK_PREFIX, chunk_key

from .snapstore_harness import Harness, write_pattern, write_sparse

CHUNK = 64 * 1024


async def stored_chunks(h: Harness) -> set[str]:
    return {info.key async for info in h.backend.list(CHUNK_PREFIX)}


async def test_round_trip_restores_identical_files(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    data = write_pattern(mem, 10 * CHUNK + 123)
    state = tmp_path / "state"
    state.write_bytes(b"device state")
    files = {"memory": mem, "state": state}
    await push_files(harness.stub, "snap-1", "", files, {"k": "v"}, chunk_size=CHUNK)

    restored = await pull_files(harness.stub, "snap-1", tmp_path / "out")

    assert restored == {"memory": tmp_path / "out/memory", "state": tmp_path / "out/state"}
    assert restored["memory"].read_bytes() == data
    assert restored["state"].read_bytes() == b"device state"
    reply = await harness.stub.GetManifest(pb.GetManifestRequest(snapshot_id="snap-1"))
    assert dict(reply.manifest.labels) == {"k": "v"}
    assert sorted(os.listdir(tmp_path / "out")) == ["memory", "state"]


async def test_second_push_of_same_file_sends_no_chunks(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    write_pattern(mem, 8 * CHUNK)
    first = await push_files(harness.stub, "a", "", {"memory": mem}, chunk_size=CHUNK)
    second = await push_files(harness.stub, "b", "a", {"memory": mem}, chunk_size=CHUNK)
    assert first.sent_chunks == 8
    assert second.sent_chunks == 0
    assert second.chunks == 8


async def test_one_byte_change_sends_one_chunk(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    data = bytearray(write_pattern(mem, 8 * CHUNK))
    await push_files(harness.stub, "a", "", {"memory": mem}, chunk_size=CHUNK)
    data[5 * CHUNK + 17] ^= 0xFF
    mem.write_bytes(data)

    stats = await push_files(harness.stub, "b", "a", {"memory": mem}, chunk_size=CHUNK)

    assert (stats.sent_chunks, stats.sent_bytes) == (1, CHUNK)
    restored = await pull_files(harness.stub, "b", tmp_path / "out")
    assert restored["memory"].read_bytes() == bytes(data)


async def test_zero_chunks_are_not_stored_and_restore_as_holes(
    harness: Harness, tmp_path: Path
) -> None:
    mem = tmp_path / "mem"
    write_sparse(mem, 64 * CHUNK, {10 * CHUNK: b"\xaa" * CHUNK, 20 * CHUNK: bytes(CHUNK)})

    stats = await push_files(harness.stub, "z", "", {"memory": mem}, chunk_size=CHUNK)

    assert (stats.chunks, stats.zero_chunks, stats.sent_chunks) == (64, 63, 1)
    assert await stored_chunks(harness) == {chunk_key(digest_of(b"\xaa" * CHUNK))}
    reply = await harness.stub.GetManifest(pb.GetManifestRequest(snapshot_id="z"))
    assert list(reply.manifest.files[0].chunk_digests).count(ZERO_CHUNK) == 63
    out = (await pull_files(harness.stub, "z", tmp_path / "out"))["memory"]
    assert out.read_bytes() == mem.read_bytes()
    assert out.stat().st_blocks * 512 <= 2 * CHUNK  # only the data chunk occupies disk


@pytest.mark.parametrize("corruption", ["wrong-content", "not-zstd"])
async def test_corrupt_chunk_fails_pull_and_leaves_nothing(
    harness: Harness, tmp_path: Path, corruption: str
) -> None:
    mem = tmp_path / "mem"
    data = write_pattern(mem, 4 * CHUNK)
    await push_files(harness.stub, "c", "", {"memory": mem}, chunk_size=CHUNK)
    victim = digest_of(data[CHUNK : 2 * CHUNK])
    bad = compress(b"x" * CHUNK) if corruption == "wrong-content" else b"garbage"
    await harness.backend.put(chunk_key(victim), bad)
    out = tmp_path / "out"

    with pytest.raises(Internal, match=victim):
        await pull_files(harness.stub, "c", out)

    assert os.listdir(out) == []


async def test_missing_chunk_fails_pull_with_not_found(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    data = write_pattern(mem, 4 * CHUNK)
    await push_files(harness.stub, "m", "", {"memory": mem}, chunk_size=CHUNK)
    victim = digest_of(data[2 * CHUNK : 3 * CHUNK])
    await harness.backend.delete(chunk_key(victim))
    out = tmp_path / "out"

    with pytest.raises(NotFound, match=victim):
        await pull_files(harness.stub, "m", out)

    assert os.listdir(out) == []


async def test_missing_snapshot_is_not_found(harness: Harness, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="nope"):
        await pull_files(harness.stub, "nope", tmp_path / "out")


async def test_gc_keeps_chunks_still_referenced(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    data = bytearray(write_pattern(mem, 4 * CHUNK))
    await push_files(harness.stub, "old", "", {"memory": mem}, chunk_size=CHUNK)
    data[0] ^= 0xFF  # "new" shares chunks 1..3 with "old", chunk 0 differs
    mem.write_bytes(data)
    await push_files(harness.stub, "new", "old", {"memory": mem}, chunk_size=CHUNK)
    assert len(await stored_chunks(harness)) == 5

    await harness.stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id="old"))
    gc = await harness.stub.CollectGarbage(pb.CollectGarbageRequest(grace_seconds=0))

    assert (gc.deleted_chunks, gc.kept_chunks, gc.deleted_bytes > 0) == (1, 4, True)
    assert len(await stored_chunks(harness)) == 4
    listed = await harness.stub.ListManifests(pb.ListManifestsRequest())
    assert list(listed.snapshot_ids) == ["new"]
    restored = await pull_files(harness.stub, "new", tmp_path / "out")
    assert restored["memory"].read_bytes() == bytes(data)


async def test_gc_spares_young_unreferenced_chunks(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    write_pattern(mem, 2 * CHUNK)
    await push_files(harness.stub, "s", "", {"memory": mem}, chunk_size=CHUNK)
    await harness.stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id="s"))

    gc = await harness.stub.CollectGarbage(pb.CollectGarbageRequest(grace_seconds=3600))

    assert (gc.deleted_chunks, gc.kept_chunks) == (0, 2)


async def test_upload_with_wrong_digest_is_rejected(harness: Harness) -> None:
    wrong = digest_of(b"something else")

    async def requests() -> AsyncIterator[pb.PutChunksRequest]:
        yield pb.PutChunksRequest(chunk=pb.Chunk(digest=wrong, data=compress(b"data"), size=4))

    with pytest.raises(InvalidArgument, match="rejected upload"), typed_rpc_errors():
        await harness.stub.PutChunks(requests())
    assert await stored_chunks(harness) == set()


async def test_manifest_needs_its_chunks_and_is_immutable(harness: Harness) -> None:
    digest = digest_of(b"abc")
    entry = pb.FileEntry(name="f", size=3, chunk_size=CHUNK, chunk_digests=[digest])
    manifest = pb.Manifest(snapshot_id="x", files=[entry])
    with pytest.raises(Conflict, match="not stored"), typed_rpc_errors():
        await harness.stub.PutManifest(pb.PutManifestRequest(manifest=manifest))

    async def requests() -> AsyncIterator[pb.PutChunksRequest]:
        yield pb.PutChunksRequest(chunk=pb.Chunk(digest=digest, data=compress(b"abc"), size=3))

    await harness.stub.PutChunks(requests())
    await harness.stub.PutManifest(pb.PutManifestRequest(manifest=manifest))
    await harness.stub.PutManifest(pb.PutManifestRequest(manifest=manifest))  # idempotent
    manifest.labels["changed"] = "yes"
    with pytest.raises(AlreadyExists), typed_rpc_errors():
        await harness.stub.PutManifest(pb.PutManifestRequest(manifest=manifest))


async def test_unsafe_names_are_refused(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    mem.write_bytes(b"x")
    with pytest.raises(InvalidArgument):
        await push_files(harness.stub, "../escape", "", {"memory": mem})
    with pytest.raises(InvalidArgument):
        await push_files(harness.stub, "ok", "", {"../memory": mem})
    entry = pb.FileEntry(name="../evil", size=0, chunk_size=CHUNK)
    with pytest.raises(InvalidArgument), typed_rpc_errors():
        await harness.stub.PutManifest(
            pb.PutManifestRequest(manifest=pb.Manifest(snapshot_id="e", files=[entry]))
        )


async def test_stored_chunks_are_zstd_frames(harness: Harness, tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    mem.write_bytes(b"compressible " * 10000)
    await push_files(harness.stub, "zz", "", {"memory": mem}, chunk_size=CHUNK)
    for key in await stored_chunks(harness):
        stored = await harness.backend.get(key)
        assert len(stored) < CHUNK // 10
        assert zstandard.get_frame_parameters(stored).content_size in (CHUNK, 130000 % CHUNK)


async def test_a_build_context_is_pushed_once_and_pulled_by_its_hash(
    harness: Harness, tmp_path: Path
) -> None:
    tarball = tmp_path / "context.tar.gz"
    write_pattern(tarball, 3 * CHUNK + 5)
    await push_context(harness.stub, "0123abcd", tarball)
    pulled = await pull_context(harness.stub, "0123abcd", tmp_path / "node")
    assert pulled.read_bytes() == tarball.read_bytes()
    with pytest.raises(NotFound):
        await pull_context(harness.stub, "ffff", tmp_path / "other")
    with pytest.raises(InvalidArgument, match="not a lower-case hex digest"):
        await pull_context(harness.stub, "../etc", tmp_path / "bad")
