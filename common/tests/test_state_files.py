"""Versioned state files: the format written, older formats upgraded step by step, newer ones
refused by name, unknown fields per kind, atomic replacement."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from aenv_common.state_files import (
    MalformedStateFile,
    NewerStateFormat,
    StateFormat,
    Unknown,
    UnknownStateFields,
    defaulted,
    renamed,
    write_atomically,
)

V1 = StateFormat("thing", 1, frozenset({"a", "b"}), Unknown.REFUSE)
# Format 2 renamed a to alpha; format 3 added c (older files mean 0).
V3 = StateFormat("thing", 3, frozenset({"alpha", "b", "c"}), Unknown.REFUSE,
                 upgrades={1: renamed("a", "alpha"), 2: defaulted({"c": 0})})


def test_writer_writes_the_current_format_and_reader_gives_back_every_field(
        tmp_path: Path) -> None:
    path = tmp_path / "thing.json"
    V3.write(path, {"alpha": 1, "b": [1, "x"], "c": 2})
    assert json.loads(path.read_text()) == {"format": 3, "alpha": 1, "b": [1, "x"], "c": 2}
    assert V3.read(path) == {"alpha": 1, "b": [1, "x"], "c": 2}


def test_a_document_without_format_is_format_1_and_is_upgraded_step_by_step(
        tmp_path: Path) -> None:
    path = tmp_path / "thing.json"
    path.write_text(json.dumps({"a": 7, "b": "x"}))  # what agents wrote before formats
    assert V1.read(path) == {"a": 7, "b": "x"}
    assert V3.read(path) == {"alpha": 7, "b": "x", "c": 0}
    path.write_text(json.dumps({"format": 2, "alpha": 7, "b": "x"}))
    assert V3.read(path) == {"alpha": 7, "b": "x", "c": 0}


def test_a_newer_format_is_refused_naming_the_file_its_format_and_the_newest_read(
        tmp_path: Path) -> None:
    path = tmp_path / "thing.json"
    V3.write(path, {"alpha": 1, "b": 2, "c": 3})
    with pytest.raises(NewerStateFormat) as caught:
        V1.read(path)
    assert str(caught.value) == (f"{path} is format 3; this node agent reads formats up to 1: "
                                 "upgrade the node agent")
    assert (caught.value.found, caught.value.newest) == (3, 1)
    assert not isinstance(caught.value, ValueError)  # a refusal, not a file to skip


def test_unknown_fields_are_refused_or_dropped_as_the_kind_says() -> None:
    data = json.dumps({"a": 1, "b": 2, "later": 3})
    with pytest.raises(UnknownStateFields, match=r"x.json holds fields .* \(later\)") as caught:
        V1.decode(data, "x.json")
    assert not isinstance(caught.value, ValueError)  # a refusal, not a file to skip
    lenient = StateFormat("thing", 1, frozenset({"a", "b"}), Unknown.IGNORE)
    assert lenient.decode(data, "x.json") == {"a": 1, "b": 2}


@pytest.mark.parametrize("data", ["not json", "[1]", '{"format": "2"}', '{"format": 0}',
                                  '{"format": true}'])
def test_what_is_not_a_document_of_a_known_shape_is_malformed(data: str) -> None:
    with pytest.raises(MalformedStateFile) as caught:
        V1.decode(data, "x.json")
    assert isinstance(caught.value, ValueError)  # skipped where unreadable files are


def test_a_format_without_every_upgrade_step_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"\[2\]"):
        StateFormat("thing", 3, frozenset(), Unknown.REFUSE, upgrades={1: renamed("a", "b")})


def test_a_kind_may_keep_the_version_key_its_documents_always_had() -> None:
    kind = StateFormat("head", 1, frozenset({"seq"}), Unknown.REFUSE, reader="snapstore",
                       version_key="v")
    assert json.loads(kind.encode({"seq": 3})) == {"v": 1, "seq": 3}
    assert kind.decode('{"v": 1, "seq": 3}', "volumes/heads/x") == {"seq": 3}
    with pytest.raises(NewerStateFormat, match=(
            "volumes/heads/x is format 2; this snapstore reads formats up to 1: "
            "upgrade the snapstore")):
        kind.decode('{"v": 2, "seq": 3}', "volumes/heads/x")


def test_the_writer_owns_the_format_key() -> None:
    document: dict[str, Any] = {"format": 9, "a": 1}
    with pytest.raises(ValueError):
        V1.encode(document)


def test_writes_replace_the_file_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "thing.json"
    path.write_text("old")
    path.chmod(0o644)
    write_atomically(path, b"new", mode=0o600)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["thing.json"]  # no temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "thing.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomically(path, "not bytes", mode=0o600)  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["thing.json"]
