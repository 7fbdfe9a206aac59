"""Snapshots whose memory image is made after the call returns (from a frozen copy): what the
stores do with them, without VMs (test_incremental_capture_vm.py has them with real ones)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from aenv_nodeagent.memimage import MemoryImage, MemoryImages, image_in
from aenv_nodeagent.snapshots import SnapshotMeta, SnapshotStore, new_snapshot_id


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


def test_a_snapshot_left_pending_by_a_stopped_agent_is_dropped_on_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    earlier = SnapshotStore(tmp_path)
    pending, complete = _meta(earlier, pending=True), _meta(earlier, pending=False)
    for path in image_in(complete.directory):
        path.write_bytes(b"image")
    with caplog.at_level(logging.ERROR, logger="aenv_nodeagent.snapshots"):
        loaded = SnapshotStore(tmp_path).load()
    assert [meta.snapshot_id for meta in loaded] == [complete.snapshot_id]
    assert not pending.directory.exists()
    [lost] = [r for r in caplog.records if r.getMessage().startswith("snapshot lost")]
    assert vars(lost)["snapshot_id"] == pending.snapshot_id
    assert "secret-token" not in caplog.text


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
