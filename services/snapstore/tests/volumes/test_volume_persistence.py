"""Sync to the backend and reopening elsewhere, on the filesystem backend and on S3 (moto):
commit makes writes durable, a fresh work dir rebuilds the volume from the backend (data
fetched lazily), a local copy is reused only when it matches the head, and a crash at any
point of a sync leaves the backend at the previous consistent state."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from aenv_snapstore.backends.base import Backend, ObjectInfo
from aenv_snapstore.volumes import ROOT_INO, Volume, VolumeStore
from aenv_snapstore.volumes.layout import CHUNK_PREFIX, HEAD_PREFIX, read_head
from aenv_snapstore.volumes.model import CHUNK_SIZE
from aenv_snapstore.volumes.sync import COMPACT_EVERY

from .conftest import StoreFactory, new_volume

MIB = 1 << 20


def pattern(size: int, seed: int) -> bytes:
    """Incompressible-ish, every chunk distinct."""
    return b"".join(seed.to_bytes(4, "little") + i.to_bytes(4, "little")
                    for i in range(size // 8 + 1))[:size]


async def populate(vol: Volume) -> dict[str, bytes]:
    d = await vol.mkdir(ROOT_INO, "dir", mode=0o750, uid=1000, gid=1000)
    files = {"/dir/big": pattern(3 * CHUNK_SIZE + 123, 1), "/small": b"hello volume",
             "/dir/sparse": b""}
    big = await vol.create(d.ino, "big", mode=0o644, uid=1000, gid=1000, exclusive=True)
    await vol.write(big.ino, 0, files["/dir/big"])
    small = await vol.create(ROOT_INO, "small", mode=0o600, uid=0, gid=0, exclusive=True)
    await vol.write(small.ino, 0, files["/small"])
    sparse = await vol.create(d.ino, "sparse", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(sparse.ino, 5 * CHUNK_SIZE, b"end")
    files["/dir/sparse"] = bytes(5 * CHUNK_SIZE) + b"end"
    await vol.symlink(d.ino, "link", "big", uid=0, gid=0)
    return files


async def read_all(vol: Volume, path: str) -> bytes:
    attr = await vol.resolve(path)
    data, eof = await vol.read(attr.ino, 0, attr.size + 10)
    assert eof
    return data


async def check(vol: Volume, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        assert await read_all(vol, path) == data, path
    assert await vol.readlink((await vol.resolve("/dir/link")).ino) == "big"
    assert (await vol.resolve("/dir")).mode == 0o750


async def test_commit_then_reopen_from_a_fresh_work_dir(
    any_backend: Backend, make_store: StoreFactory
) -> None:
    vol = await new_volume(make_store(any_backend, "a"))
    files = await populate(vol)
    await vol.commit()
    usage = await vol.usage()
    # Another snapstore (or this one after losing its disk) opens it from the backend.
    other = make_store(any_backend, "b")
    assert await other.usage("vol-test") == usage
    reopened = await other.open("vol-test")
    await check(reopened, files)
    entries, _ = await reopened.readdir((await reopened.resolve("/dir")).ino, 0, 10)
    assert [e.name for e in entries] == ["big", "sparse", "link"]
    # All-zero chunks are holes: never stored.
    digests = [i.key async for i in any_backend.list(CHUNK_PREFIX)]
    assert len(digests) == 4 + 1 + 1  # big: 4 chunks, small, sparse's last chunk


async def test_background_sync_without_commit(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(fs_backend, "a", sync_interval_s=0.05)
    await store.start()
    vol = await new_volume(store)
    f = await vol.create(ROOT_INO, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(f.ino, 0, b"synced by the timer")
    for _ in range(100):
        if (await read_head(fs_backend, "vol-test")).seq > 0:
            break
        await asyncio.sleep(0.02)
    other = await make_store(fs_backend, "b").open("vol-test")
    assert await read_all(other, "/f") == b"synced by the timer"


async def test_clean_local_copy_is_reused_and_stale_one_rebuilt(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    first = make_store(fs_backend, "a")
    vol = await new_volume(first)
    files = await populate(vol)
    await first.close()  # clean: syncs, then marks the local copy as matching the head
    again = make_store(fs_backend, "a")
    reused = await again.open("vol-test")
    await check(reused, files)
    # Another host changes the volume meanwhile: the old local copy no longer matches the head.
    await again.close()
    elsewhere = make_store(fs_backend, "b")
    changed = await elsewhere.open("vol-test")
    small = await changed.resolve("/small")
    await changed.write(small.ino, 0, b"HELLO")
    await elsewhere.close()
    back = await make_store(fs_backend, "a").open("vol-test")
    assert await read_all(back, "/small") == b"HELLO volume"


async def test_unclean_local_copy_is_not_trusted(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    crashing = FailingBackend(fs_backend)
    store = make_store(crashing, "a")
    vol = await new_volume(store)
    f = await vol.create(ROOT_INO, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(f.ino, 0, b"durable")
    await vol.commit()
    await vol.write(f.ino, 0, b"LOST!!!")  # unstable, never committed
    crashing.fail_all = True
    await store.close()  # its last sync fails: the local copy stays marked unclean
    reopened = await make_store(fs_backend, "a").open("vol-test")
    assert await read_all(reopened, "/f") == b"durable"


class FailingBackend:
    """The backend, but puts fail ("the process died here") once `fails(key)` says so."""

    def __init__(self, inner: Backend, fails: Callable[[str], bool] = lambda _k: False) -> None:
        self._inner = inner
        self.fails = fails
        self.fail_all = False
        self.puts: list[str] = []

    async def put(self, key: str, data: bytes) -> None:
        if self.fail_all or self.fails(key):
            self.fail_all = True  # nothing after the crash point happens
            raise ConnectionError(f"crashed before put {key}")
        self.puts.append(key)
        await self._inner.put(key, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        return self._inner.list(prefix)


def after_n(n: int, prefix: str) -> Callable[[str], bool]:
    seen = [0]

    def fails(key: str) -> bool:
        if key.startswith(prefix):
            seen[0] += 1
        return seen[0] > n

    return fails


@pytest.mark.parametrize("crash_point", ["second chunk", "log", "head"])
async def test_crash_mid_sync_leaves_the_previous_state(
    any_backend: Backend, make_store: StoreFactory, crash_point: str
) -> None:
    fails = {
        "second chunk": after_n(1, CHUNK_PREFIX),
        "log": lambda k: "/log/" in k,
        "head": lambda k: k.startswith(HEAD_PREFIX),
    }[crash_point]
    backend = FailingBackend(any_backend)
    store = make_store(backend, "a")
    vol = await new_volume(store)
    files = await populate(vol)
    await vol.commit()
    head = await read_head(any_backend, "vol-test")
    # A second sync: new data in every chunk of big, a new file, a removal, a rename.
    big = await vol.resolve("/dir/big")
    await vol.write(big.ino, 0, pattern(3 * CHUNK_SIZE, 2))
    await vol.create(ROOT_INO, "new", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.remove(ROOT_INO, "small")
    await vol.rename(ROOT_INO, "dir", ROOT_INO, "renamed")
    backend.fails = fails
    with pytest.raises(ConnectionError):
        await vol.commit()
    assert backend.puts  # the sync got somewhere before the crash
    assert await read_head(any_backend, "vol-test") == head
    # A snapstore started after the crash serves the last committed state, whole.
    recovered = await make_store(any_backend, "b").open("vol-test")
    await check(recovered, files)
    entries, _ = await recovered.readdir(ROOT_INO, 0, 10)
    assert sorted(e.name for e in entries) == ["dir", "small"]
    # And it syncs on from there (over whatever the crashed sync left past the head).
    f = await recovered.create(ROOT_INO, "after", mode=0o644, uid=0, gid=0, exclusive=True)
    await recovered.write(f.ino, 0, b"after the crash")
    await recovered.commit()
    assert await read_all(await make_store(any_backend, "c").open("vol-test"), "/after") == \
        b"after the crash"


async def test_truncate_and_remove_reach_the_backend(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    vol = await new_volume(make_store(fs_backend, "a"))
    f = await vol.create(ROOT_INO, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(f.ino, 0, pattern(3 * CHUNK_SIZE, 3))
    g = await vol.create(ROOT_INO, "g", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(g.ino, 0, b"gone soon")
    await vol.commit()
    await vol.setattr(f.ino, size=CHUNK_SIZE + 10)
    await vol.setattr(f.ino, size=2 * CHUNK_SIZE)  # the regrown part is zeros, not old bytes
    await vol.remove(ROOT_INO, "g")
    await vol.commit()
    other = await make_store(fs_backend, "b").open("vol-test")
    data = await read_all(other, "/f")
    assert data == pattern(CHUNK_SIZE + 10, 3) + bytes(CHUNK_SIZE - 10)
    assert (await other.usage()).used_bytes == 2 * CHUNK_SIZE
    assert [e.name for e in (await other.readdir(ROOT_INO, 0, 10))[0]] == ["f"]


async def test_lazy_fetch_after_reopen_and_partial_writes(
    any_backend: Backend, make_store: StoreFactory
) -> None:
    vol = await new_volume(make_store(any_backend, "a"))
    f = await vol.create(ROOT_INO, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    original = pattern(4 * CHUNK_SIZE, 4)
    await vol.write(f.ino, 0, original)
    await vol.commit()
    other = await make_store(any_backend, "b").open("vol-test")
    # A write into the middle of a chunk not fetched yet keeps the chunk's other bytes.
    await other.write(f.ino, CHUNK_SIZE + 100, b"PATCH")
    await other.setattr(f.ino, size=3 * CHUNK_SIZE + 7)  # cuts a chunk not fetched yet
    expected = bytearray(original[:3 * CHUNK_SIZE + 7])
    expected[CHUNK_SIZE + 100:CHUNK_SIZE + 105] = b"PATCH"
    assert await read_all(other, "/f") == bytes(expected)
    await other.commit()
    assert await read_all(await make_store(any_backend, "c").open("vol-test"), "/f") == \
        bytes(expected)


async def test_metadata_is_logged_incrementally_and_compacted(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    vol = await new_volume(make_store(fs_backend, "a"))
    for i in range(200):
        await vol.create(ROOT_INO, f"f{i}", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.commit()
    log_sizes = []
    for i in range(COMPACT_EVERY + 5):
        await vol.setattr((await vol.resolve(f"/f{i}")).ino, mode=0o600)
        await vol.commit()
        seq = (await read_head(fs_backend, "vol-test")).seq
        key = f"volumes/vol-test/log/{seq:016d}"
        if i < 5:
            log_sizes.append(len(await fs_backend.get(key)))
    # One changed row per sync, not the whole table: each log is small.
    assert max(log_sizes) < 400
    head = await read_head(fs_backend, "vol-test")
    assert head.checkpoint > 0  # compacted
    keys = [i.key async for i in fs_backend.list("volumes/vol-test/")]
    assert len(keys) <= COMPACT_EVERY + 2  # the old segments are gone
    other = await make_store(fs_backend, "b").open("vol-test")
    entries, _ = await other.readdir(ROOT_INO, 0, 1000)
    assert len(entries) == 200
    assert (await other.resolve("/f3")).mode == 0o600
    assert (await other.resolve("/f150")).mode == 0o644


async def test_commit_is_a_barrier_for_concurrent_writers(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    vol = await new_volume(make_store(fs_backend, "a"))
    inos = []
    for i in range(8):
        inos.append((await vol.create(ROOT_INO, f"w{i}", mode=0o644, uid=0, gid=0,
                                      exclusive=True)).ino)

    async def writer(i: int) -> None:
        for n in range(5):
            await vol.write(inos[i], n * 1000, bytes([i + 1]) * 1000)
            await vol.commit()

    await asyncio.gather(*(writer(i) for i in range(8)))
    other = await make_store(fs_backend, "b").open("vol-test")
    for i in range(8):
        assert await read_all(other, f"/w{i}") == bytes([i + 1]) * 5000


async def test_write_after_store_close_and_work_dir_layout(
    fs_backend: Backend, make_store: StoreFactory, tmp_path: Any
) -> None:
    store: VolumeStore = make_store(fs_backend, "a")
    vol = await new_volume(store)
    f = await vol.create(ROOT_INO, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    await vol.write(f.ino, 10 * CHUNK_SIZE, b"x")
    data_file = next((tmp_path / "a" / "vol-test" / "data").rglob(str(f.ino)))
    assert os.stat(data_file).st_blocks * 512 < CHUNK_SIZE  # sparse
    await store.destroy("vol-test")
    assert not (tmp_path / "a" / "vol-test").exists()
    assert [i.key async for i in fs_backend.list("volumes/vol-test/")] == []
    assert not await fs_backend.has("volumes/heads/vol-test")
