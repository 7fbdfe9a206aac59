"""VolumeService over a real grpc.aio server: lifecycle, tickets, the endpoint and every content
call with its error codes, on the in-memory fake store and on the real one (fs backend, and S3 on
moto for one pass)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_snapstore.volumes.model import ROOT_INO
from aenv_snapstore.volumes.tickets import Grant

from .volume_harness import VolumeHarness, volume_harness_fixture  # noqa: F401

VOL = "vol-aaaaaaaaaaaaaaaaaaaa"
MiB = 1 << 20
FILE, DIR, LINK = (pb.VOLUME_ENTRY_TYPE_FILE, pb.VOLUME_ENTRY_TYPE_DIRECTORY,
                   pb.VOLUME_ENTRY_TYPE_SYMLINK)


async def code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    code: grpc.StatusCode = info.value.code()
    return code


def header(path: str, **kw: Any) -> pb.WriteFileRequest:
    return pb.WriteFileRequest(header=pb.WriteFileHeader(volume_id=VOL, path=path, **kw))


async def write(h: VolumeHarness, path: str, data: bytes, **kw: Any) -> pb.VolumeEntry:
    async def stream() -> AsyncIterator[pb.WriteFileRequest]:
        yield header(path, **kw)
        for start in range(0, len(data), MiB):
            yield pb.WriteFileRequest(data=data[start:start + MiB])
        yield pb.WriteFileRequest(end=True)

    reply: pb.WriteFileResponse = await h.stub.WriteFile(stream())
    return reply.entry


async def read(h: VolumeHarness, path: str) -> bytes:
    return b"".join([m.data async for m in h.stub.ReadFile(
        pb.ReadFileRequest(volume_id=VOL, path=path))])


async def names_in_root(h: VolumeHarness) -> list[str]:
    """Every entry of the root as the store has it (WriteFile's temp names included)."""
    volume = await h.store.open(VOL)
    entries, _ = await volume.readdir(ROOT_INO, 0, 1000)
    return sorted(e.name for e in entries)


@pytest.fixture
async def vol(volume_harness: VolumeHarness) -> VolumeHarness:
    await volume_harness.stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL))
    return volume_harness


async def test_lifecycle_and_usage(volume_harness: VolumeHarness) -> None:
    h = volume_harness
    created = await h.stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL))
    assert created.quota_bytes == h.default_quota
    sized = await h.stub.CreateVolume(pb.CreateVolumeRequest(volume_id="vol-b", quota_bytes=5000))
    assert sized.quota_bytes == 5000
    assert await code_of(h.stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL))) == \
        grpc.StatusCode.ALREADY_EXISTS
    await write(h, "/f", b"x" * 1234)
    usage = await h.stub.GetVolumeUsage(pb.GetVolumeUsageRequest(volume_id=VOL))
    assert (usage.used_bytes, usage.quota_bytes, usage.files) == (1234, h.default_quota, 2)
    await h.stub.DestroyVolume(pb.DestroyVolumeRequest(volume_id=VOL))
    await h.stub.DestroyVolume(pb.DestroyVolumeRequest(volume_id=VOL))  # absent: fine
    assert await code_of(h.stub.GetVolumeUsage(pb.GetVolumeUsageRequest(volume_id=VOL))) == \
        grpc.StatusCode.NOT_FOUND
    assert await code_of(h.stub.StatPath(pb.StatPathRequest(volume_id=VOL, path="/"))) == \
        grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "x" * 41, "vol b"])
async def test_bad_volume_ids(volume_harness: VolumeHarness, bad: str) -> None:
    h = volume_harness
    assert await code_of(h.stub.CreateVolume(pb.CreateVolumeRequest(volume_id=bad))) == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(h.stub.StatPath(pb.StatPathRequest(volume_id=bad, path="/"))) == \
        grpc.StatusCode.INVALID_ARGUMENT


async def test_clone_copies_content_independently(vol: VolumeHarness) -> None:
    if not vol.real:
        pytest.skip("the fake store does not clone")
    h = vol
    await write(h, "/a", b"original")
    await h.stub.CloneVolume(pb.CloneVolumeRequest(source_id=VOL, volume_id="vol-clone"))
    await write(h, "/a", b"changed")
    data = b"".join([m.data async for m in h.stub.ReadFile(
        pb.ReadFileRequest(volume_id="vol-clone", path="/a"))])
    assert data == b"original"
    assert await code_of(h.stub.CloneVolume(pb.CloneVolumeRequest(
        source_id=VOL, volume_id="vol-clone"))) == grpc.StatusCode.ALREADY_EXISTS
    assert await code_of(h.stub.CloneVolume(pb.CloneVolumeRequest(
        source_id="vol-none", volume_id="vol-c2"))) == grpc.StatusCode.NOT_FOUND


async def test_grant_mount_round_trip(vol: VolumeHarness) -> None:
    h = vol
    reply = await h.stub.GrantMount(pb.GrantMountRequest(
        sandbox_id="sbx-1", volume_id=VOL, seen_as="vol-seen", read_only=True))
    assert h.key.verify(reply.ticket) == Grant("sbx-1", VOL, "vol-seen", True)
    plain = await h.stub.GrantMount(pb.GrantMountRequest(sandbox_id="sbx-1", volume_id=VOL))
    assert h.key.verify(plain.ticket) == Grant("sbx-1", VOL, VOL, False)
    assert await code_of(h.stub.GrantMount(pb.GrantMountRequest(
        sandbox_id="sbx-1", volume_id="vol-none"))) == grpc.StatusCode.NOT_FOUND
    assert await code_of(h.stub.GrantMount(pb.GrantMountRequest(volume_id=VOL))) == \
        grpc.StatusCode.INVALID_ARGUMENT


async def test_endpoint(volume_harness: VolumeHarness) -> None:
    reply = await volume_harness.stub.GetVolumeEndpoint(pb.GetVolumeEndpointRequest())
    assert reply.nfs_address == volume_harness.nfs_address


async def test_stat_path(vol: VolumeHarness) -> None:
    h = vol
    root = (await h.stub.StatPath(pb.StatPathRequest(volume_id=VOL, path="/"))).entry
    assert (root.path, root.type, root.mode & 0o170000) == ("/", DIR, 0o040000)
    await write(h, "/d/f.txt", b"hello", force=True, mode=0o600, uid=1000, gid=1001)
    entry = (await h.stub.StatPath(
        pb.StatPathRequest(volume_id=VOL, path="/d//./f.txt/"))).entry
    assert (entry.name, entry.path, entry.type, entry.size) == ("f.txt", "/d/f.txt", FILE, 5)
    assert (entry.mode, entry.uid, entry.gid) == (0o100600, 1000, 1001)
    assert entry.mtime_ns > 0 and entry.ctime_ns > 0
    for path, code in [("/missing", grpc.StatusCode.NOT_FOUND),
                       ("d/f.txt", grpc.StatusCode.INVALID_ARGUMENT),
                       ("/d/../etc", grpc.StatusCode.INVALID_ARGUMENT),
                       ("/d/f.txt/x", grpc.StatusCode.FAILED_PRECONDITION)]:
        got = await code_of(h.stub.StatPath(pb.StatPathRequest(volume_id=VOL, path=path)))
        assert got == code, path


async def test_make_dir(vol: VolumeHarness) -> None:
    h = vol
    made = (await h.stub.MakeDir(
        pb.MakeDirRequest(volume_id=VOL, path="/a", mode=0o700, uid=7))).entry
    assert (made.path, made.type, made.mode, made.uid) == ("/a", DIR, 0o040700, 7)
    assert await code_of(h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/a"))) == \
        grpc.StatusCode.ALREADY_EXISTS
    assert await code_of(h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/"))) == \
        grpc.StatusCode.ALREADY_EXISTS
    assert await code_of(h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/x/y"))) == \
        grpc.StatusCode.NOT_FOUND
    deep = (await h.stub.MakeDir(
        pb.MakeDirRequest(volume_id=VOL, path="/x/y/z", force=True))).entry
    assert deep.path == "/x/y/z"
    again = (await h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/x/y", force=True))).entry
    assert again.type == DIR
    await write(h, "/file", b"")
    for path, force in [("/file/sub", False), ("/file/sub", True), ("/file", True)]:
        got = await code_of(h.stub.MakeDir(pb.MakeDirRequest(
            volume_id=VOL, path=path, force=force)))
        assert got == grpc.StatusCode.FAILED_PRECONDITION, (path, force)


async def test_list_dir_depths(vol: VolumeHarness) -> None:
    h = vol
    for path in ["/top/a/one", "/top/a/b/two", "/top/c"]:
        await write(h, path, b"1", force=True)
    await h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/top/empty"))

    async def listing(depth: int) -> list[tuple[str, int]]:
        reply = await h.stub.ListDir(pb.ListDirRequest(volume_id=VOL, path="/top", depth=depth))
        return [(e.path, e.type) for e in reply.entries]

    own = [("/top/a", DIR), ("/top/c", FILE), ("/top/empty", DIR)]
    assert sorted(await listing(0)) == own
    assert sorted(await listing(1)) == own
    two = await listing(2)
    assert sorted(two) == sorted([*own, ("/top/a/one", FILE), ("/top/a/b", DIR)])
    # Each directory's entries follow it.
    assert two.index(("/top/a/one", FILE)) > two.index(("/top/a", DIR))
    assert sorted(await listing(10)) == sorted([*two, ("/top/a/b/two", FILE)])
    assert await code_of(h.stub.ListDir(pb.ListDirRequest(volume_id=VOL, path="/top/c"))) == \
        grpc.StatusCode.FAILED_PRECONDITION
    assert await code_of(h.stub.ListDir(pb.ListDirRequest(volume_id=VOL, path="/nope"))) == \
        grpc.StatusCode.NOT_FOUND


async def test_list_many_entries_across_pages(vol: VolumeHarness) -> None:
    h = vol
    volume = await h.store.open(VOL)
    for i in range(1200):
        await volume.create(ROOT_INO, f"f{i:04}", mode=0o644, uid=0, gid=0, exclusive=True)
    reply = await h.stub.ListDir(pb.ListDirRequest(volume_id=VOL, path="/"))
    assert sorted(e.name for e in reply.entries) == [f"f{i:04}" for i in range(1200)]


async def test_update_metadata(vol: VolumeHarness) -> None:
    h = vol
    await write(h, "/f", b"data", mode=0o644)
    updated = (await h.stub.UpdateMetadata(pb.UpdateMetadataRequest(
        volume_id=VOL, path="/f", mode=0o755, uid=1000))).entry
    assert (updated.mode, updated.uid, updated.gid) == (0o100755, 1000, 0)
    unchanged = (await h.stub.UpdateMetadata(
        pb.UpdateMetadataRequest(volume_id=VOL, path="/f"))).entry
    assert (unchanged.mode, unchanged.uid) == (0o100755, 1000)
    assert await code_of(h.stub.UpdateMetadata(pb.UpdateMetadataRequest(
        volume_id=VOL, path="/nope", mode=0o600))) == grpc.StatusCode.NOT_FOUND


async def test_remove_path(vol: VolumeHarness) -> None:
    h = vol
    for path in ["/t/a/b/c/file", "/t/a/x", "/t/y", "/keep"]:
        await write(h, path, b"z", force=True)
    await h.stub.RemovePath(pb.RemovePathRequest(volume_id=VOL, path="/keep"))
    await h.stub.RemovePath(pb.RemovePathRequest(volume_id=VOL, path="/t"))
    assert await names_in_root(h) == []
    for path, code in [("/t", grpc.StatusCode.NOT_FOUND), ("/", grpc.StatusCode.INVALID_ARGUMENT),
                       ("t", grpc.StatusCode.INVALID_ARGUMENT)]:
        got = await code_of(h.stub.RemovePath(pb.RemovePathRequest(volume_id=VOL, path=path)))
        assert got == code, path


async def test_read_streams_a_multi_mib_file_in_1_mib_messages(vol: VolumeHarness) -> None:
    h = vol
    data = bytes(range(256)) * (14 * 1024 + 3)  # ~3.5 MiB, not a whole number of messages
    await write(h, "/big", data)
    sizes = []
    got = bytearray()
    async for message in h.stub.ReadFile(pb.ReadFileRequest(volume_id=VOL, path="/big")):
        sizes.append(len(message.data))
        got += message.data
    assert bytes(got) == data
    assert max(sizes) == MiB and len(sizes) == 4
    await write(h, "/empty", b"")
    assert await read(h, "/empty") == b""
    for path, code in [("/", grpc.StatusCode.FAILED_PRECONDITION),
                       ("/nope", grpc.StatusCode.NOT_FOUND)]:
        assert await code_of(read(h, path)) == code, path


async def test_symlinks_stat_as_links_and_read_through(vol: VolumeHarness) -> None:
    h = vol
    await write(h, "/d/real", b"through the link", force=True)
    volume = await h.store.open(VOL)
    d = await volume.resolve("/d")
    await volume.symlink(d.ino, "rel", "real", uid=0, gid=0)
    await volume.symlink(ROOT_INO, "abs", "/d/rel", uid=0, gid=0)
    link = (await h.stub.StatPath(pb.StatPathRequest(volume_id=VOL, path="/abs"))).entry
    assert (link.type, link.target, link.mode & 0o170000) == (LINK, "/d/rel", 0o120000)
    assert await read(h, "/abs") == b"through the link"


async def test_write_creates_replaces_and_keeps_owner(vol: VolumeHarness) -> None:
    h = vol
    first = await write(h, "/f", b"one", mode=0o600, uid=5, gid=6)
    assert (first.path, first.size, first.mode, first.uid, first.gid) == \
        ("/f", 3, 0o100600, 5, 6)
    second = await write(h, "/f", b"second version")
    assert (second.size, second.mode, second.uid, second.gid) == (14, 0o100600, 5, 6)
    assert await read(h, "/f") == b"second version"
    assert await names_in_root(h) == ["f"]
    assert await code_of(write(h, "/no/parent", b"x")) == grpc.StatusCode.NOT_FOUND
    assert await code_of(write(h, "/f/under", b"x", force=True)) == \
        grpc.StatusCode.FAILED_PRECONDITION
    await h.stub.MakeDir(pb.MakeDirRequest(volume_id=VOL, path="/dir"))
    assert await code_of(write(h, "/dir", b"x")) == grpc.StatusCode.FAILED_PRECONDITION
    assert await code_of(write(h, "/", b"x")) == grpc.StatusCode.FAILED_PRECONDITION


async def test_write_needs_a_header_first(vol: VolumeHarness) -> None:
    async def data_first() -> AsyncIterator[pb.WriteFileRequest]:
        yield pb.WriteFileRequest(data=b"x")

    async def two_headers() -> AsyncIterator[pb.WriteFileRequest]:
        yield header("/f")
        yield header("/f")

    async def no_end() -> AsyncIterator[pb.WriteFileRequest]:
        yield header("/f")
        yield pb.WriteFileRequest(data=b"x")

    async def data_after_end() -> AsyncIterator[pb.WriteFileRequest]:
        yield header("/f")
        yield pb.WriteFileRequest(end=True)
        yield pb.WriteFileRequest(data=b"x")

    assert await code_of(vol.stub.WriteFile(data_first())) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(vol.stub.WriteFile(two_headers())) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(vol.stub.WriteFile(no_end())) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(vol.stub.WriteFile(data_after_end())) == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert await names_in_root(vol) == []


async def wait_for_root(h: VolumeHarness, names: list[str]) -> None:
    """The server cleans up a cancelled call after the client has gone: wait for it."""
    for _ in range(100):
        if await names_in_root(h) == names:
            return
        await asyncio.sleep(0.05)
    assert await names_in_root(h) == names


async def test_broken_write_stream_leaves_the_old_file(vol: VolumeHarness) -> None:
    h = vol
    await write(h, "/f", b"old content")
    sent = asyncio.Event()

    async def stream() -> AsyncIterator[pb.WriteFileRequest]:
        yield header("/f")
        yield pb.WriteFileRequest(data=b"new" * 100_000)
        sent.set()
        await asyncio.Event().wait()  # never ends: the caller breaks the call

    call = h.stub.WriteFile(stream())
    await sent.wait()
    await asyncio.sleep(0.2)  # the server has begun writing the temp file
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await wait_for_root(h, ["f"])
    assert await read(h, "/f") == b"old content"


async def test_quota_refuses_and_leaves_nothing_behind(volume_harness: VolumeHarness) -> None:
    h = volume_harness
    await h.stub.CreateVolume(pb.CreateVolumeRequest(volume_id=VOL, quota_bytes=3 * MiB))
    await write(h, "/f", b"a" * MiB)
    assert await code_of(write(h, "/new/deep/big", b"b" * (3 * MiB), force=True)) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await code_of(write(h, "/f", b"c" * (3 * MiB))) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await names_in_root(h) == ["f"]
    assert await read(h, "/f") == b"a" * MiB
    usage = await h.stub.GetVolumeUsage(pb.GetVolumeUsageRequest(volume_id=VOL))
    assert usage.used_bytes == MiB
