"""Captured sandbox states on this node: snapshot metadata and the frozen disk layers they use.

A snapshot is a directory `snapshots/<id>/` holding `snapshot.json` and `state` (device state
plus guest RAM), which memory/images.py turns into `memory` + `device.state` (the stream is then
gone). Its disk is a frozen qcow2 layer in `layers/`, shared with the sandbox it was taken from
and with every sandbox created from it. Layers are reference-counted by chains: a
layer file is removed only when no snapshot and no sandbox (running or paused) has it in its
chain, so deleting a snapshot that live sandboxes still use is safe (the disk stays until they
are gone).
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.private_files import write_private_json

log = logging.getLogger(__name__)

SNAPSHOT_META = "snapshot.json"
_META = SNAPSHOT_META
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_snapshot_id() -> str:
    return "snap-" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def new_layer_id() -> str:
    return "layer-" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


@dataclass
class SnapshotMeta:
    snapshot_id: str
    sandbox_id: str
    name: str
    # The template the captured guest was restored from, and the exact inputs it was built with
    # (accelerator, kernel, artifacts, size): a restore elsewhere would not boot the same guest.
    template_id: str
    template_key: str
    accelerator: str
    kernel_version: str
    artifacts_digest: str
    # Frozen disk layers, newest first; the first is this snapshot's own.
    layers: list[str]
    # The access token the captured envd enforces (a secret: the file is 0600, never logged).
    guest_token: str
    envd_version: str
    created_at: float
    has_memory: bool = True
    # Internal snapshots (a fork's capture) are not listed and go away with their operation.
    hidden: bool = False
    # Stored in snapstore (snapshots/persistence.py): another node can restore it.
    persisted: bool = False
    # Its memory image is still being made from a frozen copy of the guest (memory/capture.py); a
    # node agent that finds it so on start makes it (memory/deferred.py), or drops the snapshot.
    image_pending: bool = False
    directory: Path = field(default=Path("."), compare=False)
    # The volumes its guest had mounted, without tickets (volumes/mounts.py `saved_mounts`):
    # its record says them, and the gateway grants a create from it its own.
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def captured(self) -> bool:
        """The capture stream, or the memory image made from it, is on disk (or being made)."""
        return (self.image_pending or self.state.is_file()
                or (self.directory / "device.state").is_file())

    @property
    def names(self) -> list[str]:
        return [self.name] if self.name else [self.snapshot_id]


class LayerStore:
    """Frozen qcow2 layers, named by id; removed when no chain references them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, layer_id: str) -> Path:
        return self.root / f"{layer_id}.qcow2"

    def collect(self, in_use: Iterable[str]) -> list[str]:
        keep = set(in_use)
        removed = []
        for layer in self.root.glob("*.qcow2"):
            if layer.stem not in keep:
                layer.unlink(missing_ok=True)
                removed.append(layer.stem)
        if removed:
            log.info("unused disk layers removed", extra={"layers": removed})
        return removed


class SnapshotStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        root.mkdir(parents=True, exist_ok=True)
        self._snapshots: dict[str, SnapshotMeta] = {}

    def new_directory(self, snapshot_id: str) -> Path:
        directory = self._root / snapshot_id
        directory.mkdir(mode=0o700)
        return directory

    def add(self, meta: SnapshotMeta) -> None:
        write_private_json(meta.directory / _META, asdict(meta))
        self._snapshots[meta.snapshot_id] = meta

    def save(self, meta: SnapshotMeta) -> None:
        """Rewrite the metadata of a snapshot still held (it may have been deleted meanwhile)."""
        if self._snapshots.get(meta.snapshot_id) is meta:
            write_private_json(meta.directory / _META, asdict(meta))

    def staging_directory(self, snapshot_id: str) -> Path:
        """Where a pull lands first; `load` removes it if a crash leaves it behind."""
        return self._root / f".pull-{snapshot_id}"

    def find(self, snapshot_id: str) -> SnapshotMeta | None:
        return self._snapshots.get(snapshot_id)

    def get(self, snapshot_id: str) -> SnapshotMeta:
        meta = self._snapshots.get(snapshot_id)
        if meta is None:
            raise NotFound(f"snapshot \"{snapshot_id}\" not found")
        if meta.has_memory and not meta.captured:
            raise Conflict(f"snapshot \"{snapshot_id}\" has no memory state file")
        return meta

    def listed(self, sandbox_id: str = "") -> list[SnapshotMeta]:
        return sorted(
            (m for m in self._snapshots.values()
             if not m.hidden and (not sandbox_id or m.sandbox_id == sandbox_id)),
            key=lambda m: m.created_at,
        )

    def layers_in_use(self) -> set[str]:
        return {layer for meta in self._snapshots.values() for layer in meta.layers}

    def templates_in_use(self) -> set[str]:
        return {meta.template_id for meta in self._snapshots.values()}

    def remove(self, snapshot_id: str) -> None:
        meta = self._snapshots.pop(snapshot_id, None)
        if meta is None:
            raise NotFound(f"snapshot \"{snapshot_id}\" not found")
        shutil.rmtree(meta.directory, ignore_errors=True)

    def discard_directory(self, directory: Path) -> None:
        shutil.rmtree(directory, ignore_errors=True)

    def load(self) -> list[SnapshotMeta]:
        """Snapshots left by an earlier run (some with their memory image still to be made);
        hidden ones (an interrupted fork) are removed."""
        for meta_file in self._root.glob(f"[!.]*/{_META}"):  # not a pull's staging directory
            meta = read_meta(meta_file, meta_file.parent)
            if meta.hidden:
                shutil.rmtree(meta.directory, ignore_errors=True)
            else:
                self._snapshots[meta.snapshot_id] = meta
        for leftover in self._root.iterdir():
            if leftover.is_dir() and (
                leftover.name.startswith(".") or not (leftover / _META).is_file()
            ):
                shutil.rmtree(leftover, ignore_errors=True)  # a capture or pull cut short
        return list(self._snapshots.values())


def read_meta(meta_file: Path, directory: Path) -> SnapshotMeta:
    """A snapshot.json, for a snapshot living in `directory` (not necessarily its own)."""
    data = json.loads(meta_file.read_text())
    data["directory"] = directory
    return SnapshotMeta(**data)
