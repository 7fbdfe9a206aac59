"""Captured sandbox states on this node: snapshot metadata and the frozen disk layers they use.

A snapshot is a directory `snapshots/<id>/` holding `snapshot.json` (snapshots/meta.py) and
`state` (device state plus guest RAM), which memory/images.py turns into `memory` +
`device.state` (the stream is then gone). Its disk is a frozen qcow2 layer in `layers/`, shared
with the sandbox it was taken from and with every sandbox created from it. Layers are
reference-counted by chains: a layer file is removed only when no snapshot and no sandbox
(running or paused) has it in its chain, so deleting a snapshot that live sandboxes still use is
safe (the disk stays until they are gone).
"""

from __future__ import annotations

import logging
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path

from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.snapshots.meta import SNAPSHOT_META, SnapshotMeta, read_meta, write_meta

# The metadata (snapshots/meta.py) is exported with the store the wing finds it in.
__all__ = ["SNAPSHOT_META", "LayerStore", "SnapshotMeta", "SnapshotStore", "new_layer_id",
           "new_snapshot_id", "read_meta"]

log = logging.getLogger(__name__)

_META = SNAPSHOT_META
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_snapshot_id() -> str:
    return "snap-" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def new_layer_id() -> str:
    return "layer-" + "".join(secrets.choice(_ALPHABET) for _ in range(16))


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
        write_meta(meta)
        self._snapshots[meta.snapshot_id] = meta

    def save(self, meta: SnapshotMeta) -> None:
        """Rewrite the metadata of a snapshot still held (it may have been deleted meanwhile)."""
        if self._snapshots.get(meta.snapshot_id) is meta:
            write_meta(meta)

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
