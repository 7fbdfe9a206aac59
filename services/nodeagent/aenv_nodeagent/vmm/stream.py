"""Split a QEMU migration stream into one RAM block's pages and everything else.

QEMU 7.2 migrates every page of a share=off RAM block, so a capture holds the guest's whole RAM.
`split_ram_block` reads such a stream once and writes that block's pages into a sparse file at
their offsets (zero pages stay holes) and the rest of the stream, unchanged but for those pages,
into another file. Loading the rest into a QEMU whose RAM block is mapped from the page file
gives the captured guest back: QEMU keeps mapped content for pages the stream does not carry.

Only what a precopy capture of a stopped VM without compression, XBZRLE or multifd contains is
understood; anything else is refused with `UnsupportedStream` rather than guessed at.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.errors import VmmError

PAGE_SIZE = 4096  # TARGET_PAGE_SIZE on x86_64
_MAGIC = b"QEVM\x00\x00\x00\x03"  # QEMU_VM_FILE_MAGIC, QEMU_VM_FILE_VERSION

# Section types (migration/savevm.c).
_CONFIGURATION = 0x07
_SUBSECTION = 0x05
_SECTION_START = 0x01
_SECTION_PART = 0x02
_SECTION_END = 0x03
_SECTION_FOOTER = 0x7E
_RAM_SECTIONS = (_SECTION_START, _SECTION_PART, _SECTION_END)

# RAM record flags (migration/ram.c): the low bits of each record's be64 address word.
_ZERO = 0x02
_MEM_SIZE = 0x04
_PAGE = 0x08
_EOS = 0x10
_CONTINUE = 0x20
_KNOWN_FLAGS = _ZERO | _MEM_SIZE | _PAGE | _EOS | _CONTINUE
_FLAG_MASK = PAGE_SIZE - 1

IOV_MAX = 1024
_CANCEL_CHECK_RECORDS = 4096
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class UnsupportedStream(VmmError):
    """A stream this splitter does not understand (or a truncated one)."""


class SplitCancelled(Exception):
    """The caller asked the split to stop; its outputs are incomplete."""


@dataclass(frozen=True)
class SplitResult:
    block_bytes: int  # the block's size, which the page file is truncated to
    pages_written: int  # non-zero pages
    rest_bytes: int


@dataclass(frozen=True)
class StreamLayout:
    """Where a stream's parts end, as byte offsets."""

    sections_start: int  # the end of the header and configuration
    ram_section_ends: tuple[int, ...]  # the end of each RAM section, in order
    ram_section_id: int | None


class _Reader:
    """Cursor over the mapped stream; every read past the end is an UnsupportedStream."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.view = memoryview(data)
        self.pos = 0

    def close(self) -> None:
        self.view.release()
        self.data.close()

    def take(self, n: int) -> int:
        start = self.pos
        self.pos += n
        if self.pos > len(self.data):
            raise UnsupportedStream("migration stream is truncated")
        return start

    def byte(self) -> int:
        return self.data[self.take(1)]

    def peek(self) -> int:
        if self.pos >= len(self.data):
            raise UnsupportedStream("migration stream is truncated")
        return self.data[self.pos]

    def u32(self) -> int:
        value: int = _U32.unpack_from(self.data, self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = _U64.unpack_from(self.data, self.take(8))[0]
        return value

    def name(self) -> bytes:
        length = self.byte()
        start = self.take(length)
        return bytes(self.data[start:start + length])


class _PageWriter:
    """Writes pages at their offsets, one pwritev per run of adjacent pages."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._run: list[memoryview] = []
        self._run_start = 0
        self._run_end = -1
        self.pages = 0

    def page(self, offset: int, data: memoryview) -> None:
        if offset != self._run_end or len(self._run) >= IOV_MAX:
            self.flush()
            self._run_start = offset
        self._run.append(data)
        self._run_end = offset + PAGE_SIZE
        self.pages += 1

    def filled(self, offset: int, fill: int) -> None:
        self.flush()
        os.pwrite(self._fd, bytes([fill]) * PAGE_SIZE, offset)
        self._run_end = -1
        self.pages += 1

    def discard(self) -> None:
        self._run = []  # drops its views of the stream, so the stream can be unmapped

    def flush(self) -> None:
        if self._run:
            expected = len(self._run) * PAGE_SIZE
            if os.pwritev(self._fd, self._run, self._run_start) != expected:
                raise OSError(f"short write of RAM pages at offset {self._run_start}")
            self._run = []


class _Splitter:
    def __init__(self, reader: _Reader, block: bytes, pages: _PageWriter,
                 cancelled: threading.Event | None) -> None:
        self.reader = reader
        self.block = block
        self.pages = pages
        self.cancelled = cancelled
        self.kept: list[tuple[int, int]] = []  # [start, end) ranges of the stream to keep
        self.keep_from = 0
        self.ignore_shared = False
        self.block_bytes: int | None = None
        self.block_pages_seen = 0
        self.current: bytes | None = None  # the block named by the last full record

    def run(self) -> None:
        self.sections()
        self._check_complete()
        self.kept.append((self.keep_from, len(self.reader.data)))

    def sections(self) -> StreamLayout:
        """Read the header and the RAM sections; the reader is left at the first other one."""
        r = self.reader
        if bytes(r.data[r.take(len(_MAGIC)):r.pos]) != _MAGIC:
            raise UnsupportedStream("not a QEMU migration stream of version 3")
        if r.peek() == _CONFIGURATION:
            self._configuration()
        sections_start = r.pos
        ram_section: int | None = None
        ram_ends: list[int] = []
        while r.peek() in _RAM_SECTIONS:
            kind = r.byte()
            section_id = r.u32()
            if kind == _SECTION_START:
                name = r.name()
                r.take(8)  # instance and version id
                if name != b"ram" or ram_section is not None:
                    raise UnsupportedStream(f"unexpected live section {name!r}")
                ram_section = section_id
            elif section_id != ram_section:
                raise UnsupportedStream(f"section {section_id} continues before it started")
            self._ram_records()
            if r.byte() != _SECTION_FOOTER or r.u32() != section_id:
                raise UnsupportedStream("RAM section without its footer")
            ram_ends.append(r.pos)
        return StreamLayout(sections_start, tuple(ram_ends), ram_section)

    def _configuration(self) -> None:
        r = self.reader
        r.byte()
        r.take(r.u32())  # machine type
        while r.peek() == _SUBSECTION:
            r.byte()
            name = r.name()
            r.u32()  # version
            if name == b"configuration/capabilities":
                capabilities = [r.name() for _ in range(r.u32())]
                self.ignore_shared = b"x-ignore-shared" in capabilities
            elif name == b"configuration/target-page-bits":
                if r.u32() != PAGE_SIZE.bit_length() - 1:
                    raise UnsupportedStream("stream uses another target page size")
            elif name == b"configuration/uuid":
                r.take(16)
            else:
                raise UnsupportedStream(f"unknown configuration subsection {name!r}")

    def _ram_records(self) -> None:
        # The hot loop (one pass per guest page): reads go straight to the mapped stream.
        r, data, view, unpack = self.reader, self.reader.data, self.reader.view, _U64.unpack_from
        end, block, records = len(data), self.block, 0
        while True:
            start = r.pos
            if start + 8 > end:
                raise UnsupportedStream("migration stream is truncated")
            word = unpack(data, start)[0]
            r.pos = start + 8
            flags, offset = word & _FLAG_MASK, word & ~_FLAG_MASK
            if flags & ~_KNOWN_FLAGS:
                raise UnsupportedStream(f"RAM record flags {flags:#x} (compression?) unsupported")
            if flags & _EOS:
                return
            if flags & _MEM_SIZE:
                self._block_list(offset)
                continue
            if not flags & _CONTINUE:
                self.current = r.name()
            elif self.current is None:
                raise UnsupportedStream("RAM record continues no block")
            at = r.pos
            r.pos = at + (PAGE_SIZE if flags & _PAGE else 1)
            if r.pos > end:
                raise UnsupportedStream("migration stream is truncated")
            if self.current == block:
                if start > self.keep_from:
                    self.kept.append((self.keep_from, start))
                self.keep_from = r.pos
                self._block_page(offset, flags, view, at)
            records += 1
            if records % _CANCEL_CHECK_RECORDS == 0 and self.cancelled and self.cancelled.is_set():
                raise SplitCancelled()

    def _block_list(self, total: int) -> None:
        r = self.reader
        listed = 0
        while listed < total:
            name = r.name()
            length = r.u64()
            if self.ignore_shared:
                r.u64()  # the block's guest address
            if name == self.block:
                self.block_bytes = length
            listed += length

    def _block_page(self, offset: int, flags: int, view: memoryview, at: int) -> None:
        if self.block_bytes is None or offset + PAGE_SIZE > self.block_bytes:
            raise UnsupportedStream(f"page at {offset:#x} outside RAM block {self.block!r}")
        self.block_pages_seen += 1
        if flags & _PAGE:
            self.pages.page(offset, view[at:at + PAGE_SIZE])
        elif fill := view[at]:
            self.pages.filled(offset, fill)

    def _check_complete(self) -> None:
        """A share=on block skipped by x-ignore-shared, or a cut stream, would leave holes that
        read as zero: refuse rather than hand a guest half its memory."""
        if self.block_bytes is None:
            raise UnsupportedStream(f"stream has no RAM block {self.block!r}")
        expected = self.block_bytes // PAGE_SIZE
        if self.block_pages_seen != expected:
            raise UnsupportedStream(
                f"stream carries {self.block_pages_seen} of the {expected} pages of RAM block "
                f"{self.block!r}")


def split_ram_block(
    stream: Path, block: str, pages_path: Path, rest_path: Path,
    cancelled: threading.Event | None = None,
) -> SplitResult:
    """Write `block`'s pages to `pages_path` and the rest of `stream` to `rest_path` (both
    created). Blocking; run it in a thread. On error the outputs are left for the caller."""
    with open(stream, "rb") as source:
        if os.fstat(source.fileno()).st_size == 0:
            raise UnsupportedStream("migration stream is empty")
        data = mmap.mmap(source.fileno(), 0, prot=mmap.PROT_READ)
    data.madvise(mmap.MADV_SEQUENTIAL)
    reader = _Reader(data)
    try:
        fd = os.open(pages_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        reader.close()
        raise
    pages = _PageWriter(fd)
    try:
        splitter = _Splitter(reader, block.encode(), pages, cancelled)
        splitter.run()
        pages.flush()
        assert splitter.block_bytes is not None  # _check_complete
        os.ftruncate(fd, splitter.block_bytes)
        rest_bytes = _write_ranges(rest_path, reader.view, splitter.kept)
    finally:
        pages.discard()
        os.close(fd)
        reader.close()
    return SplitResult(splitter.block_bytes, pages.pages, rest_bytes)


def part_section_start(section_id: int) -> bytes:
    """The start of one more part of the RAM section `section_id` (streams a capture builds)."""
    return bytes([_SECTION_PART]) + _U32.pack(section_id)


def part_section_end(section_id: int) -> bytes:
    return _U64.pack(_EOS) + bytes([_SECTION_FOOTER]) + _U32.pack(section_id)


def page_record_header(offset: int, block: bytes | None) -> bytes:
    """The header of a page record at `offset`: naming `block`, or (None) continuing the block
    the last named record named."""
    if block is None:
        return _U64.pack(offset | _PAGE | _CONTINUE)
    return _U64.pack(offset | _PAGE) + bytes([len(block)]) + block


def stream_layout(stream: Path) -> StreamLayout:
    """Where `stream`'s configuration and RAM sections end (a device-state-only stream has no
    RAM section). Reads the RAM sections through; they hold no pages of a block named ""."""
    with open(stream, "rb") as source:
        if os.fstat(source.fileno()).st_size == 0:
            raise UnsupportedStream("migration stream is empty")
        data = mmap.mmap(source.fileno(), 0, prot=mmap.PROT_READ)
    reader = _Reader(data)
    try:
        return _Splitter(reader, b"", _PageWriter(-1), None).sections()
    finally:
        reader.close()


def _write_ranges(path: Path, view: memoryview, ranges: list[tuple[int, int]]) -> int:
    written = 0
    with open(path, "wb", opener=_private_opener) as out:
        for start, end in ranges:
            out.write(view[start:end])
            written += end - start
    return written


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)
