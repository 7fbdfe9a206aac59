"""Split a QEMU migration stream into one RAM block's pages and everything else.

QEMU 7.2 migrates every page of a share=off RAM block, so a capture holds the guest's whole RAM.
`split_ram_block` reads such a stream once and writes that block's pages into a sparse file at
their offsets (zero pages stay holes) and the rest of the stream, unchanged but for those pages,
into another file. Loading the rest into a QEMU whose RAM block is mapped from the page file
gives the captured guest back: QEMU keeps mapped content for pages the stream does not carry.

Only what a precopy capture of a stopped VM without compression, XBZRLE or multifd contains is
understood; anything else is refused with `UnsupportedStream` rather than guessed at.

The split is CPU-bound Python: the node agent runs it as a process of its own (this file as a
script, `main`), where it cannot starve the agent's event loop of the GIL. It imports nothing
but the standard library, so that process starts in a few tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import mmap
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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

_IOV_MAX = 1024
_GROWTH_POLL_S = 0.0005  # while following a capture being written
_CANCEL_CHECK_RECORDS = 4096
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class UnsupportedStream(ValueError):
    """A stream this splitter does not understand (or a truncated one)."""

    @property
    def message(self) -> str:
        return str(self)


class SplitCancelled(Exception):
    """The caller asked the split to stop; its outputs are incomplete."""


@dataclass(frozen=True)
class SplitResult:
    block_bytes: int  # the block's size, which the page file is truncated to
    pages_written: int  # non-zero pages
    rest_bytes: int


class _Reader:
    """Cursor over the mapped stream, which may still be growing: a read past its end waits for
    the writer, and is an UnsupportedStream once the writer is done (`written` set)."""

    def __init__(self, fd: int, written: threading.Event, cancelled: threading.Event | None,
                 before_remap: Callable[[], None]) -> None:
        self.fd = fd
        self.written = written
        self.cancelled = cancelled
        self.before_remap = before_remap  # releases what still refers to the old mapping
        self.data = mmap.mmap(-1, 1)  # replaced by the first mapping of the stream
        self.view = memoryview(self.data)
        self.pos = 0

    def close(self) -> None:
        self.view.release()
        self.data.close()

    def ensure(self, end: int) -> int:
        """Wait until the stream holds `end` bytes; returns how many it holds now."""
        while end > len(self.data):
            done = self.written.is_set()  # before the size: a size read after it is final
            size = os.fstat(self.fd).st_size
            if size > len(self.data):
                self._remap(size)
            elif done:
                raise UnsupportedStream("migration stream is truncated")
            elif self.cancelled is not None and self.cancelled.is_set():
                raise SplitCancelled()
            else:
                time.sleep(_GROWTH_POLL_S)
        return len(self.data)

    def total(self) -> int:
        """The stream's final length (waits for the writer)."""
        self.written.wait()
        return self.ensure(os.fstat(self.fd).st_size)

    def _remap(self, size: int) -> None:
        self.before_remap()
        self.view.release()
        self.data.close()
        self.data = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        self.data.madvise(mmap.MADV_SEQUENTIAL)
        self.view = memoryview(self.data)

    def take(self, n: int) -> int:
        start = self.pos
        self.pos += n
        if self.pos > len(self.data):
            self.ensure(self.pos)
        return start

    # Each read takes first: taking may map the grown stream anew.

    def byte(self) -> int:
        at = self.take(1)
        return self.data[at]

    def peek(self) -> int:
        if self.pos >= len(self.data):
            self.ensure(self.pos + 1)
        return self.data[self.pos]

    def u32(self) -> int:
        at = self.take(4)
        value: int = _U32.unpack_from(self.data, at)[0]
        return value

    def u64(self) -> int:
        at = self.take(8)
        value: int = _U64.unpack_from(self.data, at)[0]
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
        if offset != self._run_end or len(self._run) >= _IOV_MAX:
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
            self._run_start += expected  # an adjacent page still continues the run


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
        r = self.reader
        at = r.take(len(_MAGIC))
        if bytes(r.data[at:r.pos]) != _MAGIC:
            raise UnsupportedStream("not a QEMU migration stream of version 3")
        if r.peek() == _CONFIGURATION:
            self._configuration()
        ram_section: int | None = None
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
        self._check_complete()
        self.kept.append((self.keep_from, r.total()))

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
        # The hot loop (one pass per guest page): reads go straight to the mapped stream, and
        # the locals are refreshed only when it had to grow.
        r, unpack = self.reader, _U64.unpack_from
        data, view, end = r.data, r.view, len(r.data)
        block, records = self.block, 0
        while True:
            start = r.pos
            if start + 8 > end:
                end = r.ensure(start + 8)
                data, view = r.data, r.view
            word = unpack(data, start)[0]
            r.pos = start + 8
            flags, offset = word & _FLAG_MASK, word & ~_FLAG_MASK
            if flags & ~_KNOWN_FLAGS:
                raise UnsupportedStream(f"RAM record flags {flags:#x} (compression?) unsupported")
            if flags & _EOS:
                return
            if flags & _MEM_SIZE:
                self._block_list(offset)
                data, view, end = r.data, r.view, len(r.data)  # it may have had to grow
                continue
            if not flags & _CONTINUE:
                self.current = r.name()
                data, view, end = r.data, r.view, len(r.data)
            elif self.current is None:
                raise UnsupportedStream("RAM record continues no block")
            at = r.pos
            r.pos = at + (PAGE_SIZE if flags & _PAGE else 1)
            if r.pos > end:
                end = r.ensure(r.pos)
                data, view = r.data, r.view
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
    cancelled: threading.Event | None = None, written: threading.Event | None = None,
) -> SplitResult:
    """Write `block`'s pages to `pages_path` and the rest of `stream` to `rest_path` (both
    created). `written`: the stream is still being written until it is set, and the split
    follows the writer. Blocking; run it in a thread. On error the outputs are left for the
    caller."""
    if written is None:
        written = threading.Event()
        written.set()
    source = os.open(stream, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fd = os.open(pages_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        os.close(source)
        raise
    pages = _PageWriter(fd)
    reader = _Reader(source, written, cancelled, pages.flush)
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
        os.close(source)
    return SplitResult(splitter.block_bytes, pages.pages, rest_bytes)


def main(argv: Sequence[str]) -> int:
    """`stream.py STREAM BLOCK PAGES REST [--follow]`: the split, its result as JSON on stdout.
    With --follow the stream is still being written until stdin reaches end of file. Exits 2
    for a stream it does not understand (the reason on stderr); dies with its parent."""
    _die_with_parent()
    *paths, follow = (*argv, "") if len(argv) == 4 else argv
    if len(paths) != 4 or follow not in ("", "--follow"):
        print("usage: stream.py STREAM BLOCK PAGES REST [--follow]", file=sys.stderr)
        return 64
    stream, block, pages, rest = paths
    written = threading.Event()
    if follow:
        threading.Thread(target=_set_at_eof, args=(written,), daemon=True).start()
    else:
        written.set()
    try:
        result = split_ram_block(Path(stream), block, Path(pages), Path(rest), None, written)
    except UnsupportedStream as err:
        print(err.message, file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(result)))
    return 0


def _set_at_eof(written: threading.Event) -> None:
    sys.stdin.buffer.read()
    written.set()


def _die_with_parent() -> None:
    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _write_ranges(path: Path, view: memoryview, ranges: list[tuple[int, int]]) -> int:
    written = 0
    with open(path, "wb", opener=_private_opener) as out:
        for start, end in ranges:
            out.write(view[start:end])
            written += end - start
    return written


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
