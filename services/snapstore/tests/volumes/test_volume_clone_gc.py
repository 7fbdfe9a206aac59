"""Copy-on-write clones (cost: metadata; isolation both ways) and garbage collection of chunks
(nothing a volume or a clone still uses; everything else past the grace period)."""

from __future__ import annotations

import asyncio

import pytest

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes import ROOT_INO, Exists, Volume, VolumeNotFound
from aenv_snapstore.volumes.layout import CHUNK_PREFIX
from aenv_snapstore.volumes.model import CHUNK_SIZE

from .conftest import StoreFactory, new_volume
from .test_volume_persistence import pattern, read_all

MIB = 1 << 20


async def chunk_keys(backend: Backend) -> set[str]:
    return {i.key async for i in backend.list(CHUNK_PREFIX)}


async def put_file(vol: Volume, name: str, data: bytes) -> int:
    f = await vol.create(ROOT_INO, name, mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(f.ino, 0, data)
    return f.ino


async def test_clone_is_isolated_both_ways(any_backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(any_backend)
    src = await new_volume(store, "vol-src", quota=32 * MIB)
    await put_file(src, "shared", pattern(2 * CHUNK_SIZE, 1))
    await put_file(src, "uncommitted", b"written before the clone, not committed")
    await store.clone("vol-src", "vol-copy")  # syncs the source first
    copy = await store.open("vol-copy")
    assert await read_all(copy, "/uncommitted") == b"written before the clone, not committed"
    assert (await store.usage("vol-copy")).quota_bytes == 32 * MIB
    # Writes to either side are invisible to the other.
    await src.write((await src.resolve("/shared")).ino, 0, b"SOURCE")
    await copy.write((await copy.resolve("/shared")).ino, 5, b"COPY")
    await copy.create(ROOT_INO, "only-in-copy", mode=0o644, uid=0, gid=0, exclusive=True)
    await src.remove(ROOT_INO, "uncommitted")
    base = pattern(2 * CHUNK_SIZE, 1)
    assert (await read_all(src, "/shared"))[:12] == b"SOURCE" + base[6:12]
    assert (await read_all(copy, "/shared"))[:12] == base[:5] + b"COPY" + base[9:12]
    assert [e.name for e in (await src.readdir(ROOT_INO, 0, 10))[0]] == ["shared"]
    assert sorted(e.name for e in (await copy.readdir(ROOT_INO, 0, 10))[0]) == [
        "only-in-copy", "shared", "uncommitted"]
    await src.commit()
    await copy.commit()
    # And so they stay in the backend.
    other = make_store(any_backend, "other")
    assert (await read_all(await other.open("vol-src"), "/shared"))[:6] == b"SOURCE"
    assert (await read_all(await other.open("vol-copy"), "/shared"))[5:9] == b"COPY"


async def test_clone_errors(fs_backend: Backend, make_store: StoreFactory) -> None:
    store = make_store(fs_backend)
    await new_volume(store, "vol-a")
    await store.create("vol-b")
    with pytest.raises(VolumeNotFound):
        await store.clone("vol-missing", "vol-c")
    with pytest.raises(Exists):
        await store.clone("vol-a", "vol-b")
    with pytest.raises(Exists):
        await store.create("vol-a")
    assert not await store.exists("vol-c")


async def test_clone_of_64_mib_writes_no_chunk_bytes(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(fs_backend)
    src = await new_volume(store, "vol-src")
    for i in range(4):
        await put_file(src, f"f{i}", pattern(16 * MIB, i))
    await src.commit()
    before, put_before = await chunk_keys(fs_backend), store.chunks.bytes_put
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.clone("vol-src", "vol-copy")
    elapsed = loop.time() - started
    assert await chunk_keys(fs_backend) == before and store.chunks.bytes_put == put_before
    metadata = sum([i.size async for i in fs_backend.list("volumes/vol-copy/")])
    assert metadata < 16 * 1024  # 64 chunk digests and 5 inodes, compressed
    assert elapsed < 2.0
    # The clone reads the source's data (fetched lazily), and its first write adds one chunk.
    copy = await store.open("vol-copy")
    assert await read_all(copy, "/f2") == pattern(16 * MIB, 2)
    await copy.write((await copy.resolve("/f2")).ino, 0, b"changed")
    await copy.commit()
    assert len(await chunk_keys(fs_backend)) == len(before) + 1


async def test_gc_keeps_what_volumes_and_clones_use(
    any_backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(any_backend)
    src = await new_volume(store, "vol-src")
    await put_file(src, "a", pattern(2 * CHUNK_SIZE, 1))
    await put_file(src, "b", pattern(CHUNK_SIZE, 2))
    await store.clone("vol-src", "vol-copy")
    # The source drops everything; only the clone still uses these chunks.
    await src.remove(ROOT_INO, "a")
    await src.remove(ROOT_INO, "b")
    await put_file(src, "c", pattern(CHUNK_SIZE, 3))
    await src.commit()
    stats = await store.collect_garbage(0)
    assert stats.deleted_chunks == 0 and stats.kept_chunks == 4
    fresh = make_store(any_backend, "fresh")  # no local copy: every read comes from the backend
    copy = await fresh.open("vol-copy")
    assert await read_all(copy, "/a") == pattern(2 * CHUNK_SIZE, 1)
    assert await read_all(copy, "/b") == pattern(CHUNK_SIZE, 2)
    # Destroying the clone frees its chunks, but only past the grace period.
    await fresh.destroy("vol-copy")
    assert (await store.collect_garbage(3600)).deleted_chunks == 0
    stats = await store.collect_garbage(0)
    assert (stats.deleted_chunks, stats.kept_chunks, stats.volumes) == (3, 1, 1)
    assert stats.deleted_bytes > 0
    assert await read_all(await make_store(any_backend, "last").open("vol-src"), "/c") == \
        pattern(CHUNK_SIZE, 3)


async def test_gc_racing_a_sync_keeps_its_chunks(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    """A chunk collection would delete (unreferenced, old) that a sync is about to reference
    again: the sync's pin keeps it, or the sync puts it back."""
    store = make_store(fs_backend)
    vol = await new_volume(store)
    data = pattern(CHUNK_SIZE, 9)
    await put_file(vol, "a", data)
    await vol.commit()
    await vol.remove(ROOT_INO, "a")
    await vol.commit()  # the chunk is now unreferenced, but the presence cache knows it
    await put_file(vol, "b", data)  # same content again
    await asyncio.gather(store.collect_garbage(0), vol.commit())
    await store.collect_garbage(0)
    other = await make_store(fs_backend, "other").open("vol-test")
    assert await read_all(other, "/b") == data
