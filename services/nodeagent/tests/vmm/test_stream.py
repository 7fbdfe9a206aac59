"""Splitting a migration stream, on streams built here in QEMU 7.2's format.

Real captures are split by every pause and snapshot in the lifecycle VM tests, whose guests must
come back intact from the result.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aenv_nodeagent.vmm import stream as stream_module
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


def _write_slowly(path: Path, data: bytes, written: threading.Event, chunk: int) -> None:
    """A capture in progress: the stream grows a piece at a time, then is marked complete."""
    with path.open("wb", buffering=0) as out:
        for start in range(0, len(data), chunk):
            out.write(data[start:start + chunk])
            time.sleep(0.0002)
    written.set()


def _many_pages(s: Stream, count: int) -> bytes:
    # Runs of adjacent pages, zero pages and another block between: every path of the writer.
    records = []
    for i in range(count):
        records.append(s.record(b"mem", i, page(i % 251 + 1) if i % 7 else 0))
        if i % 500 == 0:
            records.append(s.record(b"pc.bios", 0, page(0x11)))
    return b"".join(records)


def test_a_stream_still_being_written_splits_as_the_finished_one(tmp_path: Path) -> None:
    count = 3000
    s = Stream({b"mem": count * PAGE_SIZE, b"pc.bios": PAGE_SIZE})
    data = s.header() + part() + _many_pages(s, count) + eos() + part(0x03) + eos() + DEVICES
    expected = split(tmp_path, data)

    growing = tmp_path / "growing"
    growing.mkdir()
    (growing / "stream").touch()
    written = threading.Event()
    writer = threading.Thread(target=_write_slowly,
                              args=(growing / "stream", data, written, 64 * 1024 + 3))
    writer.start()
    try:
        result = split_ram_block(growing / "stream", "mem", growing / "memory",
                                 growing / "rest", written=written)
    finally:
        writer.join()
    assert result.pages_written == expected[2]
    assert (growing / "memory").read_bytes() == expected[0]
    assert (growing / "rest").read_bytes() == expected[1]


def test_a_capture_that_ends_short_or_is_cancelled_stops_the_split(tmp_path: Path) -> None:
    s = Stream({b"mem": 64 * PAGE_SIZE})
    data = s.header() + part() + _many_pages(s, 64) + eos() + DEVICES
    (tmp_path / "stream").write_bytes(data[:len(data) // 2])
    ended = threading.Event()
    ended.set()
    with pytest.raises(UnsupportedStream, match="truncated"):
        split_ram_block(tmp_path / "stream", "mem", tmp_path / "memory", tmp_path / "rest",
                        written=ended)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(SplitCancelled):  # while it waits for a writer that never comes
        split_ram_block(tmp_path / "stream", "mem", tmp_path / "memory", tmp_path / "rest",
                        cancelled=stop, written=threading.Event())


def test_the_split_runs_as_a_process_of_its_own(tmp_path: Path) -> None:
    """As the node agent runs it: following a stream until stdin ends, result as JSON."""
    s = Stream({b"mem": 64 * PAGE_SIZE})
    data = s.header() + part() + _many_pages(s, 64) + eos() + DEVICES
    expected = split(tmp_path, data)
    (tmp_path / "late").write_bytes(data[:1000])
    args = [str(tmp_path / name) for name in ("late", "m2", "r2")]
    proc = subprocess.Popen(
        [sys.executable, "-I", stream_module.__file__, args[0], "mem", *args[1:], "--follow"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with (tmp_path / "late").open("ab") as out:
        out.write(data[1000:])
    out_text, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out_text)["pages_written"] == expected[2]
    assert (tmp_path / "m2").read_bytes() == expected[0]
    assert (tmp_path / "r2").read_bytes() == expected[1]

    (tmp_path / "bad").write_bytes(b"\x00" * 64)
    refused = subprocess.run([sys.executable, "-I", stream_module.__file__, str(tmp_path / "bad"),
                              "mem", *args[1:]], capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "version 3" in refused.stderr
