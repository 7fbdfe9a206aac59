"""E2B's Volume API through the unmodified e2b SDK: volumes, their content (streamed both
ways), mounts on Sandbox.create and in get_info; with a fake snapstore VolumeService."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator

import pytest
from e2b import AsyncSandbox, AsyncVolume
from e2b.exceptions import NotFoundException, SandboxException, VolumeException

from .conftest import API_KEY
from .volume_stack import VolumeStack, volume_stack

pytestmark = pytest.mark.sdk


@pytest.fixture
async def vstack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[VolumeStack]:
    async with volume_stack() as running:
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        monkeypatch.setenv("E2B_API_URL", running.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", running.url)
        monkeypatch.setenv("E2B_VOLUME_API_URL", running.url)
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        yield running


async def test_volume_lifecycle_and_content(vstack: VolumeStack) -> None:
    vol = await AsyncVolume.create("my-data_1")
    assert vol.volume_id.startswith("vol-") and vol.name == "my-data_1" and vol.token
    info = await AsyncVolume.get_info(vol.volume_id)
    assert (info.volume_id, info.name, info.token) == (vol.volume_id, "my-data_1", vol.token)
    assert [v.volume_id for v in await AsyncVolume.list()] == [vol.volume_id]
    vol = await AsyncVolume.connect(vol.volume_id)

    made = await vol.make_dir("/a/b", force=True, mode=0o750)
    assert made.type.value == "directory" and made.path == "/a/b"
    written = await vol.write_file("/a/b/hello.txt", "hello volume")
    assert written.size == len("hello volume") and written.type.value == "file"
    assert await vol.read_file("/a/b/hello.txt") == "hello volume"
    big = os.urandom(5 * (1 << 20) + 123)  # several messages each way
    stat = await vol.write_file("/big.bin", io.BytesIO(big))
    assert stat.size == len(big)
    assert await vol.read_file("/big.bin", format="bytes") == big
    streamed = b"".join([c async for c in await vol.read_file("/big.bin", format="stream")])
    assert streamed == big
    names = {e.path for e in await vol.list("/", depth=3)}
    assert {"/a", "/a/b", "/a/b/hello.txt", "/big.bin"} <= names
    updated = await vol.update_metadata("/a/b/hello.txt", uid=1000, gid=1000, mode=0o600)
    assert (updated.uid, updated.gid, updated.mode) == (1000, 1000, 0o600)
    assert await vol.exists("/a/b/hello.txt") and not await vol.exists("/nope")
    await vol.remove("/a")
    assert not await vol.exists("/a/b/hello.txt")
    with pytest.raises(NotFoundException):
        await vol.read_file("/a/b/hello.txt")

    assert await AsyncVolume.destroy(vol.volume_id) is True
    assert await AsyncVolume.destroy(vol.volume_id) is False
    assert vstack.records() == {} and vstack.snapstore.volumes == {}


async def test_bad_names_and_duplicates(vstack: VolumeStack) -> None:
    with pytest.raises(VolumeException) as bad:
        await AsyncVolume.create("no spaces/please")
    assert "Invalid volume name" in str(bad.value)
    await AsyncVolume.create("taken")
    with pytest.raises(Exception) as dup:
        await AsyncVolume.create("taken")
    assert "already exists" in str(dup.value)
    assert len(vstack.records()) == 1 and len(vstack.snapstore.volumes) == 1


async def test_mounts_on_create_and_in_info(vstack: VolumeStack) -> None:
    data = await AsyncVolume.create("data")
    await AsyncVolume.create("cfg")
    sbx = await AsyncSandbox.create("base", volume_mounts={"/data": data, "/etc/app": "cfg"})
    info = await sbx.get_info()
    assert sorted(info.volume_mounts, key=lambda m: m["path"]) == [
        {"name": "data", "path": "/data"}, {"name": "cfg", "path": "/etc/app"}]
    spec = vstack.stack.nodeagent.specs[-1]
    by_path = {m.path: m for m in spec.volume_mounts}
    assert by_path["/data"].volume_id == by_path["/data"].seen_as == data.volume_id
    assert by_path["/etc/app"].name == "cfg" and not by_path["/etc/app"].read_only
    assert all(m.ticket.startswith(f"t.{sbx.sandbox_id}.") for m in spec.volume_mounts)
    listed = await AsyncSandbox.list().next_items()
    assert [s.volume_mounts for s in listed if s.sandbox_id == sbx.sandbox_id] == [
        info.volume_mounts]

    with pytest.raises(Exception) as busy:
        await AsyncVolume.destroy(data.volume_id)
    assert sbx.sandbox_id in str(busy.value)
    await sbx.kill()
    assert await AsyncVolume.destroy(data.volume_id) is True


@pytest.mark.parametrize("mounts", [
    {"relative/path": "v"}, {"/": "v"}, {"/proc/x": "v"}, {"/sys": "v"}, {"/dev/shm": "v"},
    {"/a/../b": "v"}, {"/a/": "v"}, {"/a": "v", "/a/b": "v"}, {"/data": "no-such-volume"},
])
async def test_bad_mounts_create_nothing(
    vstack: VolumeStack, mounts: dict[str, AsyncVolume | str]
) -> None:
    await AsyncVolume.create("v")
    with pytest.raises(SandboxException) as refused:
        await AsyncSandbox.create("base", volume_mounts=mounts)
    assert refused.value.status_code in (400, 404)
    assert vstack.stack.nodeagent.specs == [] and vstack.stack.view.sandbox_records == {}
    assert vstack.snapstore.grants == []
