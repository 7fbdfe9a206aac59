"""Every Volume operation and its errors, on the filesystem backend (the operations never touch
the backend until a sync, so one backend suffices here)."""

from __future__ import annotations

import asyncio
import stat
from typing import Any

import pytest

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes import (
    ROOT_INO,
    Exists,
    InvalidName,
    IsDirectory,
    Kind,
    NameTooLong,
    NoEntry,
    NoSpace,
    NotDirectory,
    NotEmpty,
    StaleHandle,
    TooBig,
    Volume,
    VolumeNotFound,
)
from aenv_snapstore.volumes.model import CHUNK_SIZE, MAX_FILE_SIZE

from .conftest import StoreFactory, new_volume

MIB = 1 << 20


@pytest.fixture
async def vol(fs_backend: Backend, make_store: StoreFactory) -> Volume:
    volume: Volume = await new_volume(make_store(fs_backend), quota=64 * MIB)
    return volume


async def mkfile(vol: Volume, name: str, data: bytes = b"", parent: int = ROOT_INO) -> int:
    attr = await vol.create(parent, name, mode=0o644, uid=1000, gid=1000, exclusive=True)
    if data:
        await vol.write(attr.ino, 0, data)
    return attr.ino


async def names(vol: Volume, dir_ino: int = ROOT_INO) -> list[str]:
    entries, eof = await vol.readdir(dir_ino, 0, 1000)
    assert eof
    return [e.name for e in entries]


async def test_root_and_getattr(vol: Volume) -> None:
    root = await vol.getattr(ROOT_INO)
    assert root.kind is Kind.DIRECTORY and root.nlink == 2 and stat.S_IMODE(root.mode) == 0o777
    assert await vol.parent(ROOT_INO) == ROOT_INO
    assert (await vol.resolve("/")).ino == ROOT_INO
    with pytest.raises(StaleHandle):
        await vol.getattr(999)


async def test_create_write_read(vol: Volume) -> None:
    attr = await vol.create(ROOT_INO, "a.txt", mode=0o640, uid=7, gid=8, exclusive=True)
    assert (attr.kind, attr.mode, attr.uid, attr.gid, attr.size, attr.nlink) == (
        Kind.FILE, 0o640, 7, 8, 0, 1)
    after = await vol.write(attr.ino, 3, b"xyz")
    assert after.size == 6 and after.mtime_ns >= attr.mtime_ns
    assert await vol.read(attr.ino, 0, 100) == (b"\0\0\0xyz", True)
    assert await vol.read(attr.ino, 1, 2) == (b"\0\0", False)
    assert await vol.read(attr.ino, 6, 10) == (b"", True)
    assert await vol.read(attr.ino, 60, 10) == (b"", True)
    with pytest.raises(Exists):
        await vol.create(ROOT_INO, "a.txt", mode=0o644, uid=0, gid=0, exclusive=True)
    again = await vol.create(ROOT_INO, "a.txt", mode=0o600, uid=0, gid=0, exclusive=False)
    assert again.ino == attr.ino and again.size == 6  # unchecked create keeps the file
    with pytest.raises(IsDirectory):
        await vol.read(ROOT_INO, 0, 1)
    with pytest.raises(IsDirectory):
        await vol.write(ROOT_INO, 0, b"x")
    await vol.mkdir(ROOT_INO, "d", mode=0o755, uid=0, gid=0)
    with pytest.raises(IsDirectory):
        await vol.create(ROOT_INO, "d", mode=0o644, uid=0, gid=0, exclusive=False)


async def test_multi_chunk_write_read(vol: Volume) -> None:
    data = bytes(range(256)) * (3 * CHUNK_SIZE // 256) + b"tail"
    ino = await mkfile(vol, "big", data)
    got, eof = await vol.read(ino, 0, len(data))
    assert got == data and eof
    # An unaligned write across a chunk boundary.
    await vol.write(ino, CHUNK_SIZE - 2, b"ABCD")
    assert (await vol.read(ino, CHUNK_SIZE - 3, 6))[0] == data[CHUNK_SIZE - 3:CHUNK_SIZE - 2] + \
        b"ABCD" + data[CHUNK_SIZE + 2:CHUNK_SIZE + 3]
    with pytest.raises(TooBig):
        await vol.write(ino, MAX_FILE_SIZE, b"x")


async def test_setattr_and_truncate(vol: Volume) -> None:
    ino = await mkfile(vol, "f", b"0123456789")
    attr = await vol.setattr(ino, mode=0o4755, uid=5, gid=6, atime_ns=11, mtime_ns=22)
    assert (attr.mode, attr.uid, attr.gid, attr.atime_ns, attr.mtime_ns) == (0o4755, 5, 6, 11, 22)
    assert (await vol.setattr(ino, size=4)).size == 4
    assert await vol.read(ino, 0, 100) == (b"0123", True)
    assert (await vol.setattr(ino, size=8)).size == 8  # the grown part reads as zeros
    assert await vol.read(ino, 0, 100) == (b"0123\0\0\0\0", True)
    assert (await vol.usage()).used_bytes == 8
    with pytest.raises(IsDirectory):
        await vol.setattr(ROOT_INO, size=0)
    root = await vol.setattr(ROOT_INO, mode=0o700)
    assert root.mode == 0o700


async def test_mkdir_lookup_dots_and_resolve(vol: Volume) -> None:
    d = await vol.mkdir(ROOT_INO, "d", mode=0o755, uid=0, gid=0)
    sub = await vol.mkdir(d.ino, "sub", mode=0o700, uid=0, gid=0)
    assert (await vol.getattr(ROOT_INO)).nlink == 3 and (await vol.getattr(d.ino)).nlink == 3
    assert (await vol.lookup(d.ino, ".")).ino == d.ino
    assert (await vol.lookup(d.ino, "..")).ino == ROOT_INO
    assert (await vol.lookup(sub.ino, "..")).ino == d.ino
    assert await vol.parent(sub.ino) == d.ino
    ino = await mkfile(vol, "f", b"x", parent=sub.ino)
    assert (await vol.resolve("/d/sub/f")).ino == ino
    with pytest.raises(NoEntry):
        await vol.resolve("/d/nope")
    with pytest.raises(NotDirectory):
        await vol.resolve("/d/sub/f/x")
    for bad in ("d", "/d/", "//d", "/d/../d", "/d/./sub"):
        with pytest.raises(InvalidName):
            await vol.resolve(bad)
    with pytest.raises(NotDirectory):
        await vol.lookup(ino, "x")
    with pytest.raises(NotDirectory):
        await vol.parent(ino)
    with pytest.raises(Exists):
        await vol.mkdir(ROOT_INO, "d", mode=0o755, uid=0, gid=0)


@pytest.mark.parametrize("name,error", [
    ("", InvalidName), (".", InvalidName), ("..", InvalidName), ("a/b", InvalidName),
    ("a\0b", InvalidName), ("x" * 256, NameTooLong), ("é" * 128, NameTooLong),
])
async def test_bad_names(vol: Volume, name: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        await vol.create(ROOT_INO, name, mode=0o644, uid=0, gid=0, exclusive=True)
    with pytest.raises(error):
        await vol.mkdir(ROOT_INO, name, mode=0o755, uid=0, gid=0)


async def test_odd_but_valid_names(vol: Volume) -> None:
    raw = b"caf\xe9-\xff".decode("utf-8", "surrogateescape")  # not UTF-8: NFS names are bytes
    for name in ("x" * 255, "é" * 127, "...", " sp ace", raw):
        await mkfile(vol, name)
        assert (await vol.lookup(ROOT_INO, name)).kind is Kind.FILE
    assert raw in await names(vol)


async def test_symlink_and_readlink(vol: Volume) -> None:
    link = await vol.symlink(ROOT_INO, "l", "../target/x", uid=3, gid=4)
    assert link.kind is Kind.SYMLINK and link.size == len("../target/x") and link.uid == 3
    assert await vol.readlink(link.ino) == "../target/x"
    with pytest.raises(InvalidName):
        await vol.readlink(ROOT_INO)
    with pytest.raises(InvalidName):
        await vol.read(link.ino, 0, 1)
    with pytest.raises(Exists):
        await vol.symlink(ROOT_INO, "l", "y", uid=0, gid=0)
    with pytest.raises(NameTooLong):
        await vol.symlink(ROOT_INO, "long", "x" * 4096, uid=0, gid=0)
    await vol.remove(ROOT_INO, "l")
    with pytest.raises(StaleHandle):
        await vol.getattr(link.ino)


async def test_remove_rmdir(vol: Volume) -> None:
    ino = await mkfile(vol, "f", b"data")
    d = await vol.mkdir(ROOT_INO, "d", mode=0o755, uid=0, gid=0)
    await mkfile(vol, "inner", parent=d.ino)
    with pytest.raises(IsDirectory):
        await vol.remove(ROOT_INO, "d")
    with pytest.raises(NotDirectory):
        await vol.rmdir(ROOT_INO, "f")
    with pytest.raises(NotEmpty):
        await vol.rmdir(ROOT_INO, "d")
    with pytest.raises(NoEntry):
        await vol.remove(ROOT_INO, "missing")
    await vol.remove(d.ino, "inner")
    await vol.rmdir(ROOT_INO, "d")
    await vol.remove(ROOT_INO, "f")
    assert await names(vol) == []
    assert (await vol.getattr(ROOT_INO)).nlink == 2
    with pytest.raises(StaleHandle):
        await vol.read(ino, 0, 1)
    usage = await vol.usage()
    assert (usage.used_bytes, usage.files) == (0, 1)
    # Inode numbers are never reused.
    assert await mkfile(vol, "g") > d.ino


async def test_hard_links(vol: Volume) -> None:
    ino = await mkfile(vol, "a", b"shared")
    d = await vol.mkdir(ROOT_INO, "d", mode=0o755, uid=0, gid=0)
    linked = await vol.link(ino, d.ino, "b")
    assert linked.ino == ino and linked.nlink == 2
    with pytest.raises(Exists):
        await vol.link(ino, ROOT_INO, "a")
    with pytest.raises(IsDirectory):
        await vol.link(d.ino, ROOT_INO, "dlink")
    await vol.remove(ROOT_INO, "a")
    assert (await vol.getattr(ino)).nlink == 1
    assert await vol.read(ino, 0, 10) == (b"shared", True)
    await vol.remove(d.ino, "b")
    with pytest.raises(StaleHandle):
        await vol.getattr(ino)


async def test_rename_semantics(vol: Volume) -> None:
    a = await mkfile(vol, "a", b"A")
    b = await mkfile(vol, "b", b"B")
    d1 = await vol.mkdir(ROOT_INO, "d1", mode=0o755, uid=0, gid=0)
    d2 = await vol.mkdir(ROOT_INO, "d2", mode=0o755, uid=0, gid=0)
    # A file replaces a file; the replaced one is gone.
    await vol.rename(ROOT_INO, "a", ROOT_INO, "b")
    assert (await vol.lookup(ROOT_INO, "b")).ino == a
    with pytest.raises(StaleHandle):
        await vol.getattr(b)
    assert (await vol.usage()).used_bytes == 1
    # Across directories.
    await vol.rename(ROOT_INO, "b", d1.ino, "moved")
    assert await names(vol, d1.ino) == ["moved"]
    # Onto itself, and onto another name of the same file: nothing happens.
    await vol.rename(d1.ino, "moved", d1.ino, "moved")
    await vol.link(a, d1.ino, "alias")
    await vol.rename(d1.ino, "moved", d1.ino, "alias")
    assert sorted(await names(vol, d1.ino)) == ["alias", "moved"]
    # A file cannot replace a directory, nor a directory a file.
    with pytest.raises(IsDirectory):
        await vol.rename(d1.ino, "moved", ROOT_INO, "d2")
    with pytest.raises(NotDirectory):
        await vol.rename(ROOT_INO, "d2", d1.ino, "moved")
    # A directory replaces an empty directory, not a full one.
    with pytest.raises(NotEmpty):
        await vol.rename(ROOT_INO, "d2", ROOT_INO, "d1")
    await vol.rename(ROOT_INO, "d1", ROOT_INO, "d2")
    assert (await vol.lookup(ROOT_INO, "d2")).ino == d1.ino
    with pytest.raises(StaleHandle):
        await vol.getattr(d2.ino)
    # A directory moved under another changes its parent and the link counts.
    sub = await vol.mkdir(ROOT_INO, "sub", mode=0o755, uid=0, gid=0)
    assert (await vol.getattr(ROOT_INO)).nlink == 4
    await vol.rename(ROOT_INO, "sub", d1.ino, "sub")
    assert await vol.parent(sub.ino) == d1.ino
    assert (await vol.getattr(ROOT_INO)).nlink == 3
    assert (await vol.getattr(d1.ino)).nlink == 3
    # Not into itself or below itself.
    with pytest.raises(InvalidName):
        await vol.rename(ROOT_INO, "d2", sub.ino, "loop")
    with pytest.raises(InvalidName):
        await vol.rename(ROOT_INO, "d2", d1.ino, "self")
    with pytest.raises(NoEntry):
        await vol.rename(ROOT_INO, "nope", ROOT_INO, "x")
    with pytest.raises(NotDirectory):
        await vol.rename(a, "x", ROOT_INO, "y")
    with pytest.raises(InvalidName):
        await vol.rename(ROOT_INO, "d2", ROOT_INO, "..")


async def test_readdir_paging_with_cookies(vol: Volume) -> None:
    for i in range(25):
        await mkfile(vol, f"f{i:02d}")
    seen: list[str] = []
    cookie, eof, pages = 0, False, 0
    while not eof:
        entries, eof = await vol.readdir(ROOT_INO, cookie, 10)
        assert all(e.cookie > 2 for e in entries)  # 1 and 2: left for "." and ".."
        seen += [e.name for e in entries]
        cookie = entries[-1].cookie if entries else cookie
        pages += 1
        if pages == 1:
            # Entries removed and added between pages: the walk still resumes from its cookie.
            await vol.remove(ROOT_INO, "f00")
            await vol.remove(ROOT_INO, "f15")
            await mkfile(vol, "late")
    assert pages == 3
    assert seen == [f"f{i:02d}" for i in range(25) if i != 15] + ["late"]
    entries, eof = await vol.readdir(ROOT_INO, 0, 100)
    assert eof and entries[0].attr.kind is Kind.FILE
    assert await vol.readdir(ROOT_INO, entries[-1].cookie, 5) == ([], True)
    with pytest.raises(NotDirectory):
        await vol.readdir(entries[0].attr.ino, 0, 5)


async def test_quota_no_space(fs_backend: Backend, make_store: StoreFactory) -> None:
    vol = await new_volume(make_store(fs_backend), quota=2 * MIB)
    ino = await mkfile(vol, "f", b"x" * MIB)
    with pytest.raises(NoSpace):
        await vol.write(ino, MIB, b"y" * (MIB + 1))
    with pytest.raises(NoSpace):
        await vol.setattr(ino, size=3 * MIB)
    await vol.write(ino, MIB, b"y" * MIB)  # exactly full is fine
    other = await mkfile(vol, "g")
    with pytest.raises(NoSpace):
        await vol.write(other, 0, b"z")
    # Nothing else breaks: overwriting in place, reading, shrinking, removing all work.
    await vol.write(ino, 0, b"Z")
    assert (await vol.read(ino, 0, 1))[0] == b"Z"
    stats = await vol.fsstat()
    assert (stats.total_bytes, stats.free_bytes) == (2 * MIB, 0)
    await vol.setattr(ino, size=MIB)
    await vol.write(other, 0, b"z" * 10)
    stats = await vol.fsstat()
    assert stats.free_bytes == MIB - 10 and stats.free_files < stats.total_files
    await vol.commit()


async def test_concurrent_operations(vol: Volume) -> None:
    """Many calls at once (as NFS connections make them): each one whole."""
    inos = await asyncio.gather(*(mkfile(vol, f"c{i}") for i in range(20)))
    await asyncio.gather(*(vol.write(ino, 0, bytes([i]) * 5000) for i, ino in enumerate(inos)))
    reads = await asyncio.gather(*(vol.read(ino, 0, 5000) for ino in inos))
    assert [r[0] for r in reads] == [bytes([i]) * 5000 for i in range(20)]
    assert len(await names(vol)) == 20


async def test_unknown_volume_and_destroyed_handle(
    fs_backend: Backend, make_store: StoreFactory
) -> None:
    store = make_store(fs_backend)
    with pytest.raises(VolumeNotFound):
        await store.open("vol-missing")
    with pytest.raises(VolumeNotFound):
        await store.usage("vol-missing")
    vol = await new_volume(store)
    await store.destroy("vol-test")
    await store.destroy("vol-test")  # absent: fine
    calls: list[Any] = [vol.getattr(ROOT_INO), vol.commit(), vol.read(ROOT_INO, 0, 1)]
    for call in calls:
        with pytest.raises(VolumeNotFound):
            await call
    with pytest.raises(VolumeNotFound):
        await store.open("vol-test")
