"""Snapshots whose memory image is made after the call returns (from a frozen copy): what the
stores do with them, and how the agent's next run makes an image it left unfinished, on a real
process under the preload library instead of QEMU (test_incremental_capture_vm.py has VMs)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from aenv_common.errors import Internal
from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.memory.deferred import (
    REFERENCE,
    FrozenRecord,
    finish_interrupted,
    recorded,
    recorded_copy,
)
from aenv_nodeagent.memory.images import MemoryImage, MemoryImages, image_in
from aenv_nodeagent.snapshots.store import SnapshotMeta, SnapshotStore, new_snapshot_id
from aenv_nodeagent.vmm.delta import ImageParts, ram_mappings
from aenv_nodeagent.vmm.frozen import FreezeChannel
from aenv_nodeagent.vmm.preload import preload_env
from aenv_nodeagent.vmm.stream import PAGE_SIZE

from ..vmm.preloaded import PAGES, fill, start_writer


def _meta(store: SnapshotStore, *, pending: bool) -> SnapshotMeta:
    snapshot_id = new_snapshot_id()
    meta = SnapshotMeta(
        snapshot_id=snapshot_id, sandbox_id="sbx", name="", template_id="base", template_key="k",
        accelerator="tcg", kernel_version="6", artifacts_digest="d", layers=[],
        guest_token="secret-token", envd_version="1", created_at=time.time(),
        directory=store.new_directory(snapshot_id), image_pending=pending)
    store.add(meta)
    return meta


def test_a_pending_snapshot_can_be_restored_from(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    meta = _meta(store, pending=True)
    assert store.get(meta.snapshot_id) is meta  # its restores wait for the image


def test_a_snapshot_left_pending_by_a_stopped_agent_is_kept_for_its_next_run(
    tmp_path: Path,
) -> None:
    """The next run makes its image (finish_interrupted), unless it was a fork's."""
    earlier = SnapshotStore(tmp_path)
    pending, complete = _meta(earlier, pending=True), _meta(earlier, pending=False)
    forks = _meta(earlier, pending=True)
    forks.hidden = True
    earlier.save(forks)
    for path in image_in(complete.directory):
        path.write_bytes(b"image")
    loaded = SnapshotStore(tmp_path).load()
    assert sorted((m.snapshot_id, m.image_pending) for m in loaded) == sorted(
        [(pending.snapshot_id, True), (complete.snapshot_id, False)])
    assert not forks.directory.exists()


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(ensure_preload_library(tmp_path_factory.mktemp("cache"))).path


def _pages(written: dict[int, int]) -> bytes:
    return b"".join(bytes([written.get(n, n)]) * PAGE_SIZE for n in range(PAGES))


async def test_an_image_left_unfinished_is_made_from_its_frozen_copy(
    tmp_path: Path, library: Path
) -> None:
    """A writer under the preload library stands in for QEMU: its RAM file maps page n as n;
    page 1 was written before the reference (its previous capture) was taken, page 2 since,
    page 3 after the fork."""
    memory = fill(tmp_path / "memory")
    directory = tmp_path / "snapshot"
    directory.mkdir()
    (directory / REFERENCE).write_bytes(_pages({1: 0x81}))
    ours, theirs = FreezeChannel.pair()
    try:
        for writer in start_writer(
                memory, preload_env(library, memory, theirs), [theirs.fileno()]):
            writer.write(1, 2)
            copy = await ours.freeze()
            recorded(copy, ram_mappings(writer.proc.pid, memory),
                     ImageParts(1, b"head", 4, b"+devices"), directory)
            writer.write(3)
            # The agent dies here, before it made the image; its next run:
            found = recorded_copy(directory)
            assert found is not None and found.pid == copy.pid
            image = await finish_interrupted(directory, found)
    finally:
        ours.close()
        theirs.close()
    assert image.memory.read_bytes() == _pages({1: 0x81, 2: 0x82})
    assert image.device_state.read_bytes() == b"head+devices"
    assert sorted(p.name for p in directory.iterdir()) == ["device.state", "memory"]
    assert not Path(f"/proc/{copy.pid}").exists()
    copy.release()  # gone already: closes this test's pidfd


async def test_an_image_whose_frozen_copy_is_gone_is_dropped(tmp_path: Path) -> None:
    for name in (REFERENCE, "memory.part", "device.state.part"):
        (tmp_path / name).write_bytes(b"x")
    FrozenRecord(pid=os.getpid(), start_time=0, mappings=[]).write(tmp_path)  # not a copy
    copy = recorded_copy(tmp_path)
    assert copy is None
    with pytest.raises(Internal, match="frozen copy is gone"):
        await finish_interrupted(tmp_path, copy)
    assert list(tmp_path.iterdir()) == []


async def test_an_image_published_before_the_agent_died_is_taken_as_it_is(
    tmp_path: Path,
) -> None:
    for path in image_in(tmp_path):
        path.write_bytes(b"made")
    (tmp_path / REFERENCE).write_bytes(b"x")
    FrozenRecord(pid=os.getpid(), start_time=0, mappings=[]).write(tmp_path)
    assert await finish_interrupted(tmp_path, None) == image_in(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["device.state", "memory"]


async def _made(directory: Path, release: asyncio.Event, finished: list[str]) -> MemoryImage:
    await release.wait()
    finished.append(directory.name)
    return image_in(directory)


async def test_a_build_is_waited_for_never_cancelled(tmp_path: Path) -> None:
    images, release = MemoryImages(), asyncio.Event()
    finished: list[str] = []
    images.build(tmp_path / "a", _made(tmp_path / "a", release, finished))
    images.build(tmp_path / "b", _made(tmp_path / "b", release, finished))
    deleting = asyncio.ensure_future(images.cancelled(tmp_path / "a"))
    closing = asyncio.ensure_future(images.close())
    await asyncio.sleep(0.05)
    assert not deleting.done() and not closing.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(deleting, closing), 5)
    assert sorted(finished) == ["a", "b"]


async def test_restores_wait_for_the_build_of_their_image(tmp_path: Path) -> None:
    images, release = MemoryImages(), asyncio.Event()
    finished: list[str] = []
    images.build(tmp_path, _made(tmp_path, release, finished))
    restore = images.ensure(tmp_path / "state", tmp_path)  # no stream: only the build can make it
    await asyncio.sleep(0.05)
    assert not restore.done()
    release.set()
    assert await asyncio.wait_for(restore, 5) == image_in(tmp_path)
