"""A volume's head and metadata segments in the backend carry their format: what snapstores
wrote before (`"v": 1`) is read and written byte for byte as it was, a newer format is refused
naming its key, and unknown fields are refused."""

from __future__ import annotations

import json
import re

import pytest
import zstandard

from aenv_common.state_files import NewerStateFormat, UnknownStateFields
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.layout import (
    Head,
    Segment,
    checkpoint_key,
    head_key,
    load_state,
    read_head,
)

# As every snapstore so far wrote them.
OLD_HEAD = b'{"v":1,"incarnation":"inc-1","seq":3,"checkpoint":2,"quota":100,"used":5,"files":2}'
OLD_SEGMENT = {"v": 1, "meta": {"next_ino": 3},
               "inodes": [[2, [1, 420, 1, 0, 0, 5, 1, 2, 3, 1, None]], [9, None]],
               "dirents": [[1, "a\udcff", [2, 7]], [1, "gone", None]],
               "chunks": [[2, 0, "ab" * 32], [2, 1, None]]}


def _compressed(document: dict[str, object]) -> bytes:
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    return zstandard.ZstdCompressor(level=3).compress(text.encode())


def test_an_older_head_is_read_and_written_as_it_was() -> None:
    head = Head.decode(OLD_HEAD)
    assert head == Head("inc-1", 3, 2, 100, 5, 2)
    assert head.encode() == OLD_HEAD  # older snapstores of the cluster read ours


def test_an_older_segment_is_read_and_a_round_trip_keeps_every_row() -> None:
    segment = Segment.decode(_compressed(OLD_SEGMENT))
    assert segment.meta == {"next_ino": 3}
    assert segment.inodes == {2: [1, 420, 1, 0, 0, 5, 1, 2, 3, 1, None], 9: None}
    assert segment.dirents == {(1, "a\udcff"): (2, 7), (1, "gone"): None}
    assert segment.chunks == {(2, 0): "ab" * 32, (2, 1): None}
    again = Segment.decode(segment.encode())
    assert (again.meta, again.inodes, again.dirents, again.chunks) == (
        segment.meta, segment.inodes, segment.dirents, segment.chunks)


async def test_a_newer_head_or_segment_is_refused_naming_its_key(fs_backend: Backend) -> None:
    await fs_backend.put(head_key("vol-1"), OLD_HEAD.replace(b'"v":1', b'"v":2'))
    with pytest.raises(NewerStateFormat, match=re.escape(
            "volumes/heads/vol-1 is format 2; this snapstore reads formats up to 1: "
            "upgrade the snapstore")):
        await read_head(fs_backend, "vol-1")
    await fs_backend.put(checkpoint_key("vol-1", 2), _compressed(OLD_SEGMENT | {"v": 3}))
    with pytest.raises(NewerStateFormat, match=re.escape(
            f"{checkpoint_key('vol-1', 2)} is format 3")):
        await load_state(fs_backend, "vol-1", Head("inc-1", 2, 2, 100, 5, 2))


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(UnknownStateFields, match="xattrs"):
        Segment.decode(_compressed(OLD_SEGMENT | {"xattrs": []}))
    with pytest.raises(UnknownStateFields, match="reserved"):
        Head.decode(OLD_HEAD.replace(b'"files":2', b'"files":2,"reserved":1'))
