"""Every NFSv3 procedure through the server, over the store under test (the fake and the real)."""

from __future__ import annotations

import asyncio

import pytest

from aenv_snapstore.nfs import consts as c

from .conftest import VOL_A, Connect, grant
from .nfs_client import auth_sys, diropargs, fattr, fh, post_op_attr, sattr, wcc
from .nfs_ops import Ops


@pytest.fixture
async def nfs(connect: Connect) -> tuple[Ops, bytes]:
    client = await connect(grant(VOL_A))
    return Ops(client), await client.mount("/" + VOL_A)


async def test_getattr_root(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    status, attr = await ops.getattr(root)
    assert status == c.NFS3_OK and attr is not None
    assert attr.type == c.NF3DIR and attr.fileid == 1


async def test_create_write_read_commit(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    made = await ops.create(root, "hello.txt", attrs=sattr(mode=0o640))
    assert made.status == c.NFS3_OK and made.handle and made.attr
    assert made.attr.type == c.NF3REG and made.attr.mode == 0o640 and made.attr.uid == 0
    status, count, committed, verifier, after = await ops.write(made.handle, 0, b"hello world")
    assert (status, count, committed) == (c.NFS3_OK, 11, c.UNSTABLE)
    assert after is not None and after.size == 11
    status, count, committed, verifier2, _ = await ops.write(made.handle, 6, b"W", c.FILE_SYNC)
    assert (status, committed) == (c.NFS3_OK, c.FILE_SYNC) and verifier == verifier2
    assert await ops.read(made.handle, 0, 100) == (c.NFS3_OK, b"hello World", True)
    assert await ops.read(made.handle, 0, 5) == (c.NFS3_OK, b"hello", False)
    u = await ops.client.nfs(c.COMMIT, fh(made.handle).u64(0).u32(0).bytes())
    assert u.u32() == c.NFS3_OK
    _before, after = wcc(u)
    assert after is not None and after.size == 11 and u.fixed(8) == verifier


async def test_create_modes(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    first = await ops.create(root, "f", how=c.GUARDED)
    assert first.status == c.NFS3_OK
    assert (await ops.create(root, "f", how=c.GUARDED)).status == c.NFS3ERR_EXIST
    again = await ops.create(root, "f", how=c.UNCHECKED)
    assert again.status == c.NFS3_OK and again.handle == first.handle
    assert first.handle is not None
    await ops.write(first.handle, 0, b"data")
    truncated = await ops.create(root, "f", how=c.UNCHECKED, attrs=sattr(size=0))
    assert truncated.attr is not None and truncated.attr.size == 0
    # EXCLUSIVE: a retransmission with the same verifier succeeds, another verifier is EXIST.
    verifier = bytes(range(1, 9))
    exclusive = await ops.create(root, "x", how=c.EXCLUSIVE, verifier=verifier)
    assert exclusive.status == c.NFS3_OK
    retried = await ops.create(root, "x", how=c.EXCLUSIVE, verifier=verifier)
    assert retried.status == c.NFS3_OK and retried.handle == exclusive.handle
    other = await ops.create(root, "x", how=c.EXCLUSIVE, verifier=bytes(8))
    assert other.status == c.NFS3ERR_EXIST


async def test_new_nodes_belong_to_the_caller(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    ops = Ops(client, auth_sys(1000, 1001))
    made = await ops.create(root, "mine")
    assert made.attr is not None and (made.attr.uid, made.attr.gid) == (1000, 1001)
    directory = await ops.mkdir(root, "dir")
    assert directory.attr is not None and directory.attr.uid == 1000
    chosen = await ops.create(root, "theirs", attrs=sattr(uid=5, gid=6))
    assert chosen.attr is not None and (chosen.attr.uid, chosen.attr.gid) == (5, 6)


async def test_setattr_and_guard(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    made = await ops.create(root, "s")
    assert made.handle is not None
    status, after = await ops.setattr(made.handle, sattr(mode=0o600, size=100,
                                                         mtime=(1_000_000, 5)))
    assert status == c.NFS3_OK and after is not None
    assert (after.mode, after.size, after.mtime) == (0o600, 100, (1_000_000, 5))
    status, _ = await ops.setattr(made.handle, sattr(mode=0o644), guard=(1, 2))
    assert status == c.NFS3ERR_NOT_SYNC
    status, _ = await ops.setattr(made.handle, sattr(mode=0o644), guard=after.ctime)
    assert status == c.NFS3_OK


async def test_lookup_dot_dotdot_and_missing(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    sub = await ops.mkdir(root, "sub")
    assert sub.handle is not None and sub.attr is not None and sub.attr.type == c.NF3DIR
    status, handle, attr = await ops.lookup(root, "sub")
    assert status == c.NFS3_OK and handle == sub.handle and attr == sub.attr
    status, handle, _ = await ops.lookup(sub.handle, "..")
    assert status == c.NFS3_OK and handle == root
    status, handle, _ = await ops.lookup(sub.handle, ".")
    assert handle == sub.handle
    status, _, _ = await ops.lookup(root, "nope")
    assert status == c.NFS3ERR_NOENT
    status, _, _ = await ops.lookup(root, "x" * 256)
    assert status == c.NFS3ERR_NAMETOOLONG
    made = await ops.create(root, "file")
    assert made.handle is not None
    status, _, _ = await ops.lookup(made.handle, "x")
    assert status == c.NFS3ERR_NOTDIR


async def test_symlink_and_readlink(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    made = await ops.symlink(root, "link", "../target/path")
    assert made.status == c.NFS3_OK and made.handle and made.attr
    assert made.attr.type == c.NF3LNK
    u = await ops.client.nfs(c.READLINK, fh(made.handle).bytes())
    assert u.u32() == c.NFS3_OK
    post_op_attr(u)
    assert u.string() == "../target/path"


async def test_mknod_not_supported(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    args = diropargs(root, "fifo").u32(c.NF3FIFO).raw(sattr())
    assert await ops.status_of(c.MKNOD, args) == c.NFS3ERR_NOTSUPP


async def test_remove_rmdir(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    await ops.create(root, "f")
    sub = await ops.mkdir(root, "d")
    assert sub.handle is not None
    await ops.create(sub.handle, "inner")
    assert await ops.status_of(c.RMDIR, diropargs(root, "d")) == c.NFS3ERR_NOTEMPTY
    assert await ops.status_of(c.REMOVE, diropargs(root, "d")) == c.NFS3ERR_ISDIR
    assert await ops.status_of(c.REMOVE, diropargs(sub.handle, "inner")) == c.NFS3_OK
    assert await ops.status_of(c.RMDIR, diropargs(root, "d")) == c.NFS3_OK
    assert await ops.status_of(c.REMOVE, diropargs(root, "f")) == c.NFS3_OK
    assert await ops.status_of(c.REMOVE, diropargs(root, "f")) == c.NFS3ERR_NOENT
    assert (await ops.getattr(sub.handle))[0] == c.NFS3ERR_STALE


async def test_rename_and_link(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    made = await ops.create(root, "a")
    other = await ops.create(root, "b")
    sub = await ops.mkdir(root, "d")
    assert made.handle and other.handle and sub.handle
    await ops.write(made.handle, 0, b"A")
    u = await ops.client.nfs(c.RENAME, diropargs(root, "a").raw(
        diropargs(sub.handle, "moved").bytes()).bytes())
    assert u.u32() == c.NFS3_OK
    from_wcc, to_wcc = wcc(u), wcc(u)
    assert from_wcc[1] is not None and to_wcc[1] is not None
    status, handle, _ = await ops.lookup(sub.handle, "moved")
    assert status == c.NFS3_OK and handle == made.handle
    # Rename over an existing file replaces it.
    args = diropargs(sub.handle, "moved").raw(diropargs(root, "b").bytes())
    assert await ops.status_of(c.RENAME, args) == c.NFS3_OK
    assert (await ops.read(made.handle, 0, 10))[1] == b"A"
    # LINK
    u = await ops.client.nfs(c.LINK, fh(made.handle).raw(diropargs(sub.handle, "hard")
                                                         .bytes()).bytes())
    assert u.u32() == c.NFS3_OK
    attr = post_op_attr(u)
    assert attr is not None and attr.nlink == 2
    args = fh(made.handle).raw(diropargs(sub.handle, "hard").bytes())
    assert await ops.status_of(c.LINK, args) == c.NFS3ERR_EXIST


async def test_readdir_paging(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    names = {f"file-{i:03d}-{'x' * (i % 20)}" for i in range(150)}
    await asyncio.gather(*(ops.create(root, name) for name in sorted(names)))
    seen: list[str] = []
    cookie, eof, pages = 0, False, 0
    while not eof:
        status, entries, eof = await ops.readdir(root, cookie, count=1024)
        assert status == c.NFS3_OK and (entries or eof)
        seen += [name for name, _, _ in entries]
        cookie = entries[-1][2] if entries else cookie
        pages += 1
    assert pages > 3
    assert seen[:2] == [".", ".."] and set(seen[2:]) == names and len(seen) == 152
    status, _, _ = await ops.readdir(root, 0, count=64)
    assert status == c.NFS3ERR_TOOSMALL


async def test_readdirplus_paging_with_handles(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    for i in range(40):
        await ops.create(root, f"n{i}")
    sub = await ops.mkdir(root, "sub")
    assert sub.handle is not None
    found: dict[str, bytes | None] = {}
    cookie, eof = 0, False
    while not eof:
        status, entries, eof = await ops.readdirplus(root, cookie, dircount=512, maxcount=4096)
        assert status == c.NFS3_OK
        for name, next_cookie, attr, handle in entries:
            assert attr is not None
            found[name] = handle
            cookie = next_cookie
    assert len(found) == 43 and found["sub"] == sub.handle and found["."] == root
    status, handle, _ = await ops.lookup(root, "n7")
    assert found["n7"] == handle
    made = await ops.create(root, "plain")
    assert made.handle is not None
    assert (await ops.readdirplus(made.handle))[0] == c.NFS3ERR_NOTDIR


async def test_access(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    owner = Ops(client, auth_sys(1000, 1000))
    made = await owner.create(root, "f", attrs=sattr(mode=0o640))
    assert made.handle is not None
    everything = 0x3F

    async def access(cred: tuple[int, bytes], handle: bytes) -> int:
        u = await client.nfs(c.ACCESS, fh(handle).u32(everything).bytes(), cred)
        assert u.u32() == c.NFS3_OK
        post_op_attr(u)
        return u.u32()

    rw = c.ACCESS3_READ | c.ACCESS3_MODIFY | c.ACCESS3_EXTEND
    assert await access(auth_sys(1000, 1000), made.handle) == rw
    assert await access(auth_sys(2000, 1000), made.handle) == c.ACCESS3_READ
    assert await access(auth_sys(2000, 3000, (1000,)), made.handle) == c.ACCESS3_READ
    assert await access(auth_sys(2000, 2000), made.handle) == 0
    assert await access(auth_sys(0, 0), made.handle) == rw
    await owner.setattr(made.handle, sattr(mode=0o755))
    assert await access(auth_sys(0, 0), made.handle) & c.ACCESS3_EXECUTE
    root_dir = await access(auth_sys(0, 0), root)
    assert root_dir == everything & ~c.ACCESS3_EXECUTE


async def test_fsstat_fsinfo_pathconf(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    u = await ops.client.nfs(c.FSSTAT, fh(root).bytes())
    assert u.u32() == c.NFS3_OK
    post_op_attr(u)
    total, free, avail = u.u64(), u.u64(), u.u64()
    assert total > 0 and free <= total and avail == free
    u = await ops.client.nfs(c.FSINFO, fh(root).bytes())
    assert u.u32() == c.NFS3_OK
    assert post_op_attr(u) is not None
    rtmax, _rtpref, _rtmult, wtmax, _wtpref, _wtmult, dtpref = (u.u32() for _ in range(7))
    assert (rtmax, wtmax, dtpref) == (1 << 20, 1 << 20, 64 << 10)
    assert u.u64() > 1 << 40 and (u.u32(), u.u32()) == (0, 1)
    properties = u.u32()
    assert properties & (c.FSF3_SYMLINK | c.FSF3_HOMOGENEOUS | c.FSF3_CANSETTIME) == 0x1A
    u = await ops.client.nfs(c.PATHCONF, fh(root).bytes())
    assert u.u32() == c.NFS3_OK
    post_op_attr(u)
    assert (u.u32() > 1, u.u32()) == (True, 255)


async def test_large_write_and_read(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    made = await ops.create(root, "big")
    assert made.handle is not None
    data = bytes(range(256)) * 4096  # 1 MiB: the wtmax
    status, count, _, _, _ = await ops.write(made.handle, 0, data)
    assert (status, count) == (c.NFS3_OK, len(data))
    status, back, eof = await ops.read(made.handle, 0, 1 << 20)
    assert status == c.NFS3_OK and back == data and eof


async def test_null_and_getattr_of_each_type(nfs: tuple[Ops, bytes]) -> None:
    ops, root = nfs
    reply = await ops.client.call(c.NFS_PROGRAM, 3, c.NULL)
    assert reply.stat == 0
    made = await ops.symlink(root, "l", "t")
    assert made.handle is not None
    u = await ops.client.nfs(c.GETATTR, fh(made.handle).bytes())
    assert u.u32() == 0 and fattr(u).type == c.NF3LNK



async def test_pipelined_writes_then_commit(nfs: tuple[Ops, bytes]) -> None:
    """As the Linux client writes back a file: many UNSTABLE WRITEs in flight, then COMMIT."""
    ops, root = nfs
    made = await ops.create(root, "pipelined")
    assert made.handle is not None
    handle = made.handle
    chunk = 64 * 1024
    blocks = [bytes([i]) * chunk for i in range(32)]
    results = await asyncio.gather(*(ops.write(handle, i * chunk, block)
                                     for i, block in enumerate(blocks)))
    assert {r[0] for r in results} == {c.NFS3_OK} and {r[3] for r in results} == {results[0][3]}
    u = await ops.client.nfs(c.COMMIT, fh(handle).u64(0).u32(0).bytes())
    assert u.u32() == c.NFS3_OK
    reads = await asyncio.gather(*(ops.read(handle, i * chunk, chunk) for i in range(32)))
    assert [data for _, data, _ in reads] == blocks
    status, attr = await ops.getattr(handle)
    assert status == c.NFS3_OK
    assert attr is not None and attr.size == 32 * chunk


async def test_names_are_bytes(nfs: tuple[Ops, bytes]) -> None:
    """Linux names are any bytes but "/" and NUL: a name that is not UTF-8 round-trips."""
    ops, root = nfs
    raw = b"caf\xe9-latin1"
    args = diropargs(root, raw).u32(c.UNCHECKED).raw(sattr())
    assert await ops.status_of(c.CREATE, args) == c.NFS3_OK
    u = await ops.client.nfs(c.LOOKUP, diropargs(root, raw).bytes())
    assert u.u32() == c.NFS3_OK
    status, entries, _ = await ops.readdir(root)
    assert status == c.NFS3_OK
    assert raw in [name.encode("utf-8", "surrogateescape") for name, _, _ in entries]
    for bad in (b"a/b", b"a\0b", b".", b".."):
        args = diropargs(root, bad).u32(c.UNCHECKED).raw(sattr())
        assert await ops.status_of(c.CREATE, args) == c.NFS3ERR_INVAL, bad
