"""`snapshot.json`: the format-1 file read (by the store at start, as on a pull), a newer one
refused, a round trip keeps every field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from aenv_common.state_files import NewerStateFormat, UnknownStateFields
from aenv_nodeagent.snapshots.meta import SNAPSHOT_META, SnapshotMeta, read_meta
from aenv_nodeagent.snapshots.store import SnapshotStore
from tests.state_files.fixtures import newer, old_file


def _old_snapshot(root: Path) -> Path:
    directory = root / "snap-old1"
    directory.mkdir(parents=True)
    (directory / "state").write_bytes(b"captured")
    old_file(SNAPSHOT_META, directory)
    return directory


def test_an_older_agents_file_is_loaded_at_start(tmp_path: Path) -> None:
    directory = _old_snapshot(tmp_path)
    [meta] = SnapshotStore(tmp_path).load()
    assert meta == SnapshotMeta(
        "snap-old1", "sbx-old1", "my-snap", "base", "key123", "tcg", "6.1.0", "digest1",
        ["layer-aaaa"], "tok-secret", "0.1.0", 1700000000.5, has_memory=True, hidden=False,
        persisted=True, image_pending=False,
        volume_mounts=[{"volume_id": "vol-1", "path": "/mnt/data"}])
    assert meta.directory == directory  # not the stale one the file names


def test_a_round_trip_keeps_every_field(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    meta = SnapshotMeta("snap-1", "sbx-1", "n", "t", "k", "kvm", "6.8", "d", ["l2", "l1"],
                        "tok", "0.2", 1.5, has_memory=False, hidden=True, persisted=True,
                        image_pending=True, directory=store.new_directory("snap-1"),
                        volume_mounts=[{"volume_id": "v", "path": "/v", "read_only": True}])
    store.add(meta)
    written = json.loads((meta.directory / SNAPSHOT_META).read_text())
    assert written["format"] == 1 and "directory" not in written
    again = read_meta(meta.directory / SNAPSHOT_META, meta.directory)
    assert dataclasses.asdict(again) == dataclasses.asdict(meta)


def test_a_newer_format_stops_the_store_at_start(tmp_path: Path) -> None:
    newer(_old_snapshot(tmp_path) / SNAPSHOT_META, fmt=3)
    with pytest.raises(NewerStateFormat, match=re.escape(
            "snapshot.json is format 3; this node agent reads formats up to 1:")):
        SnapshotStore(tmp_path).load()


def test_a_field_this_agent_does_not_know_is_refused(tmp_path: Path) -> None:
    newer(_old_snapshot(tmp_path) / SNAPSHOT_META, fmt=1, encrypted=True)
    with pytest.raises(UnknownStateFields, match="encrypted"):
        SnapshotStore(tmp_path).load()
