"""What a connection may reach: MOUNT of its grants only, handles of its grants only (STALE for
any other volume, BADHANDLE for junk), read-only grants (ROFS on every change), a volume seen
under another id, and the volume's errors (NOSPC) through to the reply."""

from __future__ import annotations

import pytest

from aenv_snapstore.nfs import consts as c
from aenv_snapstore.nfs.session import encode_handle
from aenv_snapstore.nfs.xdr import Packer
from aenv_snapstore.volumes import VolumeStore

from .conftest import SMALL_QUOTA, VOL_A, VOL_B, VOL_SMALL, Connect, grant
from .fake_volume import FakeStore
from .nfs_client import diropargs, fh, post_op_attr, sattr
from .nfs_ops import Ops


async def _mnt(connect_client: Ops, path: str) -> tuple[int, bytes | None, list[int]]:
    reply = await connect_client.client.call(c.MOUNT_PROGRAM, 3, c.MNT_MNT,
                                             Packer().string(path).bytes())
    status = reply.body.u32()
    if status:
        return status, None, []
    handle = reply.body.opaque()
    return status, handle, [reply.body.u32() for _ in range(reply.body.u32())]


async def test_mount_protocol(connect: Connect) -> None:
    client = await connect(grant(VOL_A), grant(VOL_B, read_only=True))
    ops = Ops(client)
    status, handle, flavors = await _mnt(ops, "/" + VOL_A)
    assert status == c.MNT3_OK and handle == encode_handle(VOL_A, 1) and flavors == [1]
    assert (await _mnt(ops, "/vol-cccccccccccccccccccc"))[0] == c.MNT3ERR_ACCES
    assert (await _mnt(ops, "/etc"))[0] == c.MNT3ERR_NOENT
    assert (await _mnt(ops, VOL_A))[0] == c.MNT3ERR_NOENT  # not absolute
    made = await ops.mkdir(handle or b"", "sub")
    await ops.create(made.handle or b"", "file")
    status, sub_handle, _ = await _mnt(ops, f"/{VOL_A}/sub/")
    assert status == c.MNT3_OK and sub_handle == made.handle
    assert (await _mnt(ops, f"/{VOL_A}/sub/file"))[0] == c.MNT3ERR_NOTDIR
    assert (await _mnt(ops, f"/{VOL_A}/missing"))[0] == c.MNT3ERR_NOENT
    exports = await client.call(c.MOUNT_PROGRAM, 3, c.MNT_EXPORT)
    listed = []
    while exports.body.boolean():
        listed.append(exports.body.string())
        assert exports.body.boolean() is False  # no groups
    assert listed == ["/" + VOL_A, "/" + VOL_B]  # the grants, nothing else the store holds
    dump = await client.call(c.MOUNT_PROGRAM, 3, c.MNT_DUMP)
    assert dump.body.boolean() is False
    umnt = await client.call(c.MOUNT_PROGRAM, 3, c.MNT_UMNT, Packer().string("/" + VOL_A).bytes())
    assert (umnt.stat, umnt.body.remaining()) == (0, 0)
    assert (await client.call(c.MOUNT_PROGRAM, 3, c.MNT_UMNTALL)).stat == 0


async def test_handle_of_another_volume_is_stale(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    ops = Ops(client)
    root = await client.mount("/" + VOL_A)
    assert (await ops.getattr(encode_handle(VOL_B, 1)))[0] == c.NFS3ERR_STALE
    assert (await ops.create(encode_handle(VOL_B, 1), "x")).status == c.NFS3ERR_STALE
    # Another connection granted VOL_B does reach it with the same bytes.
    other = Ops(await connect(grant(VOL_B)))
    assert (await other.getattr(encode_handle(VOL_B, 1)))[0] == c.NFS3_OK
    # Cross-volume rename from a granted to an ungranted handle is stale, never a move.
    args = diropargs(root, "a").raw(diropargs(encode_handle(VOL_B, 1), "a").bytes())
    assert await ops.status_of(c.RENAME, args) == c.NFS3ERR_STALE


async def test_cross_volume_rename_and_link_between_grants(connect: Connect) -> None:
    client = await connect(grant(VOL_A), grant(VOL_B))
    ops = Ops(client)
    root_a, root_b = await client.mount("/" + VOL_A), await client.mount("/" + VOL_B)
    made = await ops.create(root_a, "f")
    args = diropargs(root_a, "f").raw(diropargs(root_b, "f").bytes())
    assert await ops.status_of(c.RENAME, args) == c.NFS3ERR_XDEV
    args = fh(made.handle or b"").raw(diropargs(root_b, "f").bytes())
    assert await ops.status_of(c.LINK, args) == c.NFS3ERR_XDEV


@pytest.mark.parametrize("handle", [b"", b"\x02" + bytes(20), b"\x01\x05abc", bytes(64)])
async def test_malformed_handle(connect: Connect, handle: bytes) -> None:
    ops = Ops(await connect(grant(VOL_A)))
    assert (await ops.getattr(handle))[0] == c.NFS3ERR_BADHANDLE


async def test_unknown_inode_is_stale(connect: Connect) -> None:
    ops = Ops(await connect(grant(VOL_A)))
    assert (await ops.getattr(encode_handle(VOL_A, 999_999)))[0] == c.NFS3ERR_STALE


async def test_volume_seen_under_another_id(connect: Connect) -> None:
    """A fork child's guest keeps its parent's id in its handles; its grant maps the id to the
    child's own volume."""
    client = await connect(grant(VOL_B, seen_as=VOL_A))
    ops = Ops(client)
    root = await client.mount("/" + VOL_A)
    assert root == encode_handle(VOL_A, 1)
    await ops.create(root, "child-only")
    direct = Ops(await connect(grant(VOL_B)))
    root_b = await direct.client.mount("/" + VOL_B)
    assert (await direct.lookup(root_b, "child-only"))[0] == c.NFS3_OK
    plain_a = Ops(await connect(grant(VOL_A)))
    assert (await plain_a.lookup(root, "child-only"))[0] == c.NFS3ERR_NOENT


async def test_read_only_grant_refuses_every_change(connect: Connect) -> None:
    writer = Ops(await connect(grant(VOL_A)))
    root = await writer.client.mount("/" + VOL_A)
    made = await writer.create(root, "f")
    await writer.mkdir(root, "d")
    assert made.handle is not None
    await writer.write(made.handle, 0, b"content")
    reader = Ops(await connect(grant(VOL_A, read_only=True)))
    assert await reader.client.mount("/" + VOL_A) == root
    assert (await reader.read(made.handle, 0, 100))[1] == b"content"
    refused = {
        c.SETATTR: fh(made.handle).raw(sattr(mode=0o600)).boolean(False),
        c.WRITE: fh(made.handle).u64(0).u32(1).u32(c.FILE_SYNC).opaque(b"x"),
        c.CREATE: diropargs(root, "new").u32(c.UNCHECKED).raw(sattr()),
        c.MKDIR: diropargs(root, "nd").raw(sattr()),
        c.SYMLINK: diropargs(root, "nl").raw(sattr()).string("t"),
        c.MKNOD: diropargs(root, "nn").u32(c.NF3FIFO).raw(sattr()),
        c.REMOVE: diropargs(root, "f"),
        c.RMDIR: diropargs(root, "d"),
        c.RENAME: diropargs(root, "f").raw(diropargs(root, "g").bytes()),
        c.LINK: fh(made.handle).raw(diropargs(root, "h").bytes()),
    }
    for proc, args in refused.items():
        assert await reader.status_of(proc, args) == c.NFS3ERR_ROFS, c.PROC_NAMES[proc]
    assert (await writer.lookup(root, "f"))[0] == c.NFS3_OK  # nothing changed
    assert (await writer.lookup(root, "new"))[0] == c.NFS3ERR_NOENT
    u = await reader.client.nfs(c.ACCESS, fh(made.handle).u32(0x3F).bytes())
    assert u.u32() == c.NFS3_OK
    post_op_attr(u)
    assert u.u32() & (c.ACCESS3_MODIFY | c.ACCESS3_EXTEND | c.ACCESS3_DELETE) == 0


async def test_no_space_reaches_the_reply(connect: Connect) -> None:
    ops = Ops(await connect(grant(VOL_SMALL)))
    root = await ops.client.mount("/" + VOL_SMALL)
    made = await ops.create(root, "f")
    assert made.handle is not None
    status, _, _, _, _ = await ops.write(made.handle, 0, b"x" * (SMALL_QUOTA + 1))
    assert status == c.NFS3ERR_NOSPC
    status, _, _, _, _ = await ops.write(made.handle, 0, b"x" * 100)
    assert status == c.NFS3_OK  # nothing else broke
    status, _ = await ops.setattr(made.handle, sattr(size=SMALL_QUOTA + 1))
    assert status == c.NFS3ERR_NOSPC


async def test_destroyed_or_missing_volume(connect: Connect,
                                           store: FakeStore | VolumeStore) -> None:
    """A volume destroyed under a connection is STALE from then on; a grant of a volume that
    does not exist mounts nothing."""
    client = await connect(grant(VOL_B), grant("vol-mmmmmmmmmmmmmmmmmmmm"))
    ops = Ops(client)
    root = await client.mount("/" + VOL_B)
    assert (await ops.getattr(root))[0] == c.NFS3_OK
    await store.destroy(VOL_B)
    assert (await ops.getattr(root))[0] == c.NFS3ERR_STALE
    assert (await _mnt(ops, "/vol-mmmmmmmmmmmmmmmmmmmm"))[0] == c.MNT3ERR_NOENT
    assert (await ops.getattr(encode_handle("vol-mmmmmmmmmmmmmmmmmmmm", 1)))[0] == \
        c.NFS3ERR_STALE
