"""The envelope tracker that decides whether a broken Connect stream can still end cleanly."""

from __future__ import annotations

import json
import struct

import pytest

from aenv_common.connect_end import (
    EnvelopeTracker,
    end_stream_envelope,
    is_connect_stream,
)


def _envelope(payload: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BI", flag, len(payload)) + payload


@pytest.mark.parametrize(
    ("writes", "at_boundary"),
    [
        ([], True),
        ([_envelope(b"{}")], True),
        ([_envelope(b'{"a":1}'), _envelope(b"{}")], True),
        ([_envelope(b"")], True),
        ([b"\x00\x00\x00"], False),
        ([_envelope(b"{}")[:5]], False),
        ([_envelope(b'{"a":1}')[:7]], False),
        ([_envelope(b'{"a":1}')[:3], _envelope(b'{"a":1}')[3:]], True),
        ([_envelope(b"{}") + _envelope(b'{"a":1}')[:6]], False),
        ([bytes([b]) for b in _envelope(b"xy") + _envelope(b"")], True),
    ],
)
def test_the_tracker_finds_envelope_boundaries(writes: list[bytes], at_boundary: bool) -> None:
    tracker = EnvelopeTracker()
    for write in writes:
        tracker.advance(write)
    assert tracker.at_boundary is at_boundary


def test_the_end_envelope_carries_the_status() -> None:
    end = end_stream_envelope("unavailable", "the connection to sandbox s ended")
    flag, length = struct.unpack(">BI", end[:5])
    assert flag == 0x02 and length == len(end) - 5
    assert json.loads(end[5:]) == {
        "error": {"code": "unavailable", "message": "the connection to sandbox s ended"}}


@pytest.mark.parametrize(
    ("status", "content_type", "ends"),
    [
        (200, "application/connect+json", True),
        (200, "application/connect+proto", True),
        (200, "application/json", False),  # unary: its status is already sent
        (200, "application/proto", False),
        (200, "application/grpc-web+proto", False),
        (200, "text/event-stream", False),
        (200, "application/octet-stream", False),
        (502, "application/connect+json", False),
    ],
)
def test_only_connect_streams_are_ended(status: int, content_type: str, ends: bool) -> None:
    assert is_connect_stream(status, content_type) is ends
