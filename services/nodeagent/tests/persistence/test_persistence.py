"""Snapshot persistence without VMs: real qcow2 layers (qemu-img) and a real in-process snapstore
over the fs backend; the snapshots' files are made by hand."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.memory.images import DEVICE_STATE, MEMORY
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence, layer_file
from aenv_nodeagent.snapshots.store import (
    SNAPSHOT_META,
    LayerStore,
    SnapshotMeta,
    SnapshotStore,
    new_layer_id,
    new_snapshot_id,
)

from ..lifecycle.test_warm_pool import backing_of
from ..stored import manifests

MIB = 1024 * 1024


@dataclass
class Site:
    """One node's snapshot and layer stores, and its persistence client."""

    snapshots: SnapshotStore
    layers: LayerStore
    persistence: SnapshotPersistence
    template_disk: Path


def site(root: Path, address: str, **kwargs: object) -> Site:
    root.mkdir()
    base = root / "base.raw"
    with base.open("wb") as fh:
        fh.truncate(64 * MIB)
    return Site(SnapshotStore(root / "snapshots"), LayerStore(root / "layers"),
                SnapshotPersistence(address, **kwargs), base)  # type: ignore[arg-type]


async def write_in_layer(path: Path, offset: int, data: bytes) -> None:
    proc = await asyncio.create_subprocess_exec(
        "qemu-io", "-f", "qcow2", "-c", f"write -P {data[0]} {offset} {len(data)}", str(path),
        stdout=asyncio.subprocess.DEVNULL)
    assert await proc.wait() == 0


async def take(at: Site, layers: list[str], *, memory: bytes | None) -> SnapshotMeta:
    """A snapshot over a new layer on top of `layers` (newest first), as `_capture` leaves it."""
    layer = new_layer_id()
    backing = at.layers.path(layers[0]) if layers else at.template_disk
    await create_overlay(backing, at.layers.path(layer))
    await write_in_layer(at.layers.path(layer), len(layers) * MIB, bytes([len(layers) + 1]) * MIB)
    snapshot_id = new_snapshot_id()
    meta = SnapshotMeta(
        snapshot_id=snapshot_id, sandbox_id="sbx", name="", template_id="base", template_key="k",
        accelerator="tcg", kernel_version="6", artifacts_digest="d", layers=[layer, *layers],
        guest_token="secret-token", envd_version="1", created_at=time.time(),
        has_memory=memory is not None, directory=at.snapshots.new_directory(snapshot_id))
    if memory is not None:
        (meta.directory / MEMORY).write_bytes(memory)
        (meta.directory / DEVICE_STATE).write_bytes(b"devices")
    at.snapshots.add(meta)
    return meta


def files_of(at: Site, meta: SnapshotMeta) -> Mapping[str, Path]:
    files = {SNAPSHOT_META: meta.directory / SNAPSHOT_META}
    if meta.has_memory:
        files |= {name: meta.directory / name for name in (MEMORY, DEVICE_STATE)}
    return files | {layer_file(layer): at.layers.path(layer) for layer in meta.layers}


async def persist(at: Site, meta: SnapshotMeta) -> None:
    async def ready() -> Mapping[str, Path]:
        return files_of(at, meta)

    at.persistence.persist_soon(meta, ready, at.snapshots)
    await asyncio.wait_for(at.persistence.persisted(meta.snapshot_id), 60)


async def test_persist_dedups_and_another_node_restores(snapstore: str, tmp_path: Path) -> None:
    persisted: list[str] = []

    async def on_persisted(meta: SnapshotMeta) -> None:
        persisted.append(meta.snapshot_id)

    here = site(tmp_path / "a", snapstore, on_persisted=on_persisted)
    there = site(tmp_path / "b", snapstore)
    try:
        memory = os.urandom(8 * MIB)
        first = await take(here, [], memory=memory)
        await persist(here, first)
        assert first.persisted and persisted == [first.snapshot_id]
        assert json.loads((first.directory / SNAPSHOT_META).read_text())["persisted"] is True
        # A second snapshot of the same sandbox: same memory but one page, one new small layer.
        second = await take(here, first.layers, memory=b"\1" + memory[1:])
        await persist(here, second)
        stats = here.persistence.stats[second.snapshot_id]
        assert stats.chunks - stats.zero_chunks >= 6
        assert stats.sent_chunks <= 3  # the changed memory chunk, the new layer, snapshot.json

        pulled = await there.persistence.fetch(
            second.snapshot_id, there.snapshots, there.layers, _disk(there))
        assert pulled is not None and pulled.persisted
        assert pulled.guest_token == "secret-token" and pulled.layers == second.layers
        assert (pulled.directory / MEMORY).read_bytes() == b"\1" + memory[1:]
        assert there.snapshots.find(second.snapshot_id) is pulled
        # Backing paths point at this node's files, and the guest's data reads through them.
        top, below = (there.layers.path(layer) for layer in pulled.layers)
        assert backing_of(top) == str(below)
        assert backing_of(below) == str(there.template_disk)
        assert _read(top, MIB, 1) == b"\2" and _read(top, 0, 1) == b"\1"
        assert await there.persistence.fetch(
            "snap-nosuchsnapshot", there.snapshots, there.layers, _disk(there)) is None
        assert await there.persistence.fetch(
            "team/name:v1", there.snapshots, there.layers, _disk(there)) is None

        here.persistence.forget_soon(first.snapshot_id)
        await here.persistence.close()  # waits for the delete
        assert await manifests(snapstore) == {second.snapshot_id}
    finally:
        await here.persistence.close()
        await there.persistence.close()


async def test_failed_push_keeps_the_local_copy(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                snapstore: str) -> None:
    nowhere = site(tmp_path / "a", "127.0.0.1:1", retry_delays_s=(0.05, 0.05))
    try:
        meta = await take(nowhere, [], memory=None)

        async def ready() -> Mapping[str, Path]:
            return files_of(nowhere, meta)

        nowhere.persistence.persist_soon(meta, ready, nowhere.snapshots)
        await asyncio.wait_for(nowhere.persistence.persisted(meta.snapshot_id), 60)
        assert not meta.persisted
        assert nowhere.snapshots.find(meta.snapshot_id) is meta
        assert nowhere.layers.path(meta.layers[0]).is_file()
        assert sum("push to snapstore failed" in r.message for r in caplog.records) == 3
        assert "secret-token" not in caplog.text
    finally:
        await nowhere.persistence.close()


def _disk(at: Site):  # type: ignore[no-untyped-def]
    async def disk(template_id: str) -> Path:
        assert template_id == "base"
        return at.template_disk
    return disk


def _read(layer: Path, offset: int, length: int) -> bytes:
    out = subprocess.run(["qemu-io", "-f", "qcow2", "-r", "-c",
                          f"read -v {offset} {length}", str(layer)],
                         capture_output=True, check=True, text=True).stdout
    return bytes([int(out.split()[1], 16)])
