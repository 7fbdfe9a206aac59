"""`frozen.json` (a snapshot's frozen copy): the format-1 file read, a newer one refused rather
than taken for a lost copy, a round trip keeps every field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aenv_common.state_files import NewerStateFormat
from aenv_nodeagent.memory.deferred import RECORD, FrozenRecord, forget
from aenv_nodeagent.vmm.delta import RamMapping
from tests.state_files.fixtures import newer, old_file


def test_an_older_agents_file_is_read(tmp_path: Path) -> None:
    old_file(RECORD, tmp_path)
    assert FrozenRecord.read(tmp_path) == FrozenRecord(4242, 987654, [
        RamMapping(140000000000, 536870912, 0), RamMapping(140600000000, 4096, 536870912)])


def test_a_round_trip_keeps_every_field(tmp_path: Path) -> None:
    record = FrozenRecord(7, 8, [RamMapping(1, 2, 3), RamMapping(4, 5, 6)])
    record.write(tmp_path)
    assert json.loads((tmp_path / RECORD).read_text())["format"] == 1
    assert FrozenRecord.read(tmp_path) == record


def test_a_newer_format_is_refused_not_taken_for_a_lost_copy(tmp_path: Path) -> None:
    path = newer(old_file(RECORD, tmp_path), fmt=2)
    with pytest.raises(NewerStateFormat, match=re.escape(f"{path} is format 2")):
        FrozenRecord.read(tmp_path)
    path.write_text("{cut")  # a write cut short by an older agent: unreadable, as before
    assert FrozenRecord.read(tmp_path) is None


def test_forget_removes_the_record_and_any_cut_write(tmp_path: Path) -> None:
    FrozenRecord(7, 8, []).write(tmp_path)
    cut = [tmp_path / "frozen.tmp", tmp_path / f".{RECORD}.tmp"]
    for path in cut:
        path.write_text("{")
    forget(tmp_path)
    assert list(tmp_path.iterdir()) == []
