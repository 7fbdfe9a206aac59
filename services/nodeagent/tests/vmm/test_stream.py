"""Splitting a migration stream, on streams built here in QEMU 7.2's format.

Real captures are split by every pause and snapshot in the lifecycle VM tests, whose guests must
come back intact from the result.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from aenv_nodeagent.vmm.stream import (
    PAGE_SIZE,
    SplitCancelled,
    UnsupportedStream,
    split_ram_block,
)

ZERO, MEM_SIZE, PAGE, EOS, CONTINUE = 0x02, 0x04, 0x08, 0x10, 0x20
DEVICES = b"\x04" + b"device sections QEMU alone can parse" + b"\x00"


def name(text: bytes) -> bytes:
    return bytes([len(text)]) + text


class Stream:
    """A capture: configuration, the RAM sections, then device state we never look into."""

    def __init__(self, blocks: dict[bytes, int], *, ignore_shared: bool = True) -> None:
        self.blocks = blocks
        self.ignore_shared = ignore_shared
        self.last: bytes | None = None

    def header(self) -> bytes:
        config = b"\x07" + struct.pack(">I", 7) + b"microvm"
        if self.ignore_shared:
            config += (b"\x05" + name(b"configuration/capabilities") + struct.pack(">II", 1, 1)
                       + name(b"x-ignore-shared"))
        listing = struct.pack(">Q", sum(self.blocks.values()) | MEM_SIZE)
        for block, size in self.blocks.items():
            listing += name(block) + struct.pack(">Q", size)
            listing += struct.pack(">Q", 0) if self.ignore_shared else b""
        start = b"\x01" + struct.pack(">I", 2) + name(b"ram") + struct.pack(">II", 0, 4)
        return (b"QEVM" + struct.pack(">I", 3) + config + start + listing + eos())

    def record(self, block: bytes, index: int, data: bytes | int) -> bytes:
        flags = PAGE if isinstance(data, bytes) else ZERO
        head = b""
        if block == self.last:
            flags |= CONTINUE
        else:
            head = name(block)
            self.last = block
        body = data if isinstance(data, bytes) else bytes([data])
        return struct.pack(">Q", index * PAGE_SIZE | flags) + head + body


def eos() -> bytes:
    return struct.pack(">Q", EOS) + b"\x7e" + struct.pack(">I", 2)


def part(kind: int = 0x02) -> bytes:
    return bytes([kind]) + struct.pack(">I", 2)


def page(fill: int) -> bytes:
    return bytes([fill]) * PAGE_SIZE


def split(tmp_path: Path, data: bytes, **kw: threading.Event) -> tuple[bytes, bytes, int]:
    (tmp_path / "stream").write_bytes(data)
    result = split_ram_block(tmp_path / "stream", "mem", tmp_path / "memory",
                             tmp_path / "rest", **kw)
    assert result.rest_bytes == (tmp_path / "rest").stat().st_size
    memory, rest = (tmp_path / "memory").read_bytes(), (tmp_path / "rest").read_bytes()
    return memory, rest, result.pages_written


@pytest.mark.parametrize("ignore_shared", [True, False])
def test_block_pages_land_at_their_offsets_and_the_rest_is_kept_in_order(
    tmp_path: Path, ignore_shared: bool
) -> None:
    s = Stream({b"mem": 4 * PAGE_SIZE, b"pc.bios": PAGE_SIZE}, ignore_shared=ignore_shared)
    mem = s.record(b"mem", 0, page(0xA0)) + s.record(b"mem", 1, 0)
    bios = s.record(b"pc.bios", 0, page(0x11))
    more = s.record(b"mem", 3, 0x5A) + s.record(b"mem", 2, page(0xC0))
    data = s.header() + part() + mem + bios + more + eos() + part(0x03) + eos() + DEVICES
    memory, rest, written = split(tmp_path, data)
    assert memory == page(0xA0) + page(0) + page(0xC0) + page(0x5A)
    assert written == 3  # the zero page is a hole, not a write
    assert rest == s.header() + part() + bios + eos() + part(0x03) + eos() + DEVICES
    assert (tmp_path / "memory").stat().st_blocks * 512 <= 3 * PAGE_SIZE


def test_a_block_record_after_another_block_keeps_its_name(tmp_path: Path) -> None:
    """A kept record that followed a dropped one never relied on it for its block's name."""
    s = Stream({b"mem": PAGE_SIZE, b"rom": 2 * PAGE_SIZE})
    roms = s.record(b"rom", 0, page(1))
    mem = s.record(b"mem", 0, page(2))
    again = s.record(b"rom", 1, page(3))
    assert not struct.unpack(">Q", again[:8])[0] & CONTINUE
    memory, rest, _ = split(tmp_path, s.header() + part() + roms + mem + again + eos() + DEVICES)
    assert memory == page(2)
    assert rest == s.header() + part() + roms + again + eos() + DEVICES


def test_a_block_the_stream_does_not_fully_carry_is_refused(tmp_path: Path) -> None:
    """As for a share=on block under x-ignore-shared: its holes would read as zero."""
    s = Stream({b"mem": 2 * PAGE_SIZE})
    with pytest.raises(UnsupportedStream, match="1 of the 2 pages"):
        split(tmp_path, s.header() + part() + s.record(b"mem", 0, page(1)) + eos() + DEVICES)


@pytest.mark.parametrize("damage", ["truncated", "compressed", "not a stream", "empty"])
def test_streams_it_does_not_understand_are_refused(tmp_path: Path, damage: str) -> None:
    s = Stream({b"mem": PAGE_SIZE})
    whole = s.header() + part() + s.record(b"mem", 0, page(7)) + eos() + DEVICES
    data = {
        "truncated": whole[:len(s.header()) + 100],
        "compressed": s.header() + part() + struct.pack(">Q", 0x100) + eos(),
        "not a stream": b"\x00" * 64,
        "empty": b"",
    }[damage]
    with pytest.raises(UnsupportedStream):
        split(tmp_path, data)


def test_a_cancelled_split_stops(tmp_path: Path) -> None:
    pages = 5000  # more than one cancellation check
    s = Stream({b"mem": pages * PAGE_SIZE})
    data = s.header() + part() + b"".join(s.record(b"mem", i, 0) for i in range(pages)) + eos()
    stop = threading.Event()
    stop.set()
    with pytest.raises(SplitCancelled):
        split(tmp_path, data, cancelled=stop)
