"""Delta captures: a stopped guest's device state plus only the RAM pages it changed.

A restored guest maps its base memory file copy-on-write (share=off): a page it never wrote is
still the file's, a page it wrote became private memory of the QEMU process. QEMU 7.2 cannot
migrate only those (it sends every page of a share=off block), so a delta capture builds the
stream itself: the base image's RAM sections (the block list and the ROM blocks' pages), one more
RAM section with the private pages read from the process, then the device state QEMU saved with
`xen-save-devices-state` (every device, no RAM). Loading that stream into a QEMU mapping the same
base file gives the captured guest back. The capture costs what the guest dirtied since its base,
not its RAM size, and the VM is stopped for all of it.
"""

from __future__ import annotations

import array
import ctypes
import mmap
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from aenv_nodeagent.vmm.argv import MEMORY_BACKEND_ID
from aenv_nodeagent.vmm.errors import CaptureFailed
from aenv_nodeagent.vmm.stream import (
    IOV_MAX,
    PAGE_SIZE,
    UnsupportedStream,
    page_record_header,
    part_section_end,
    part_section_start,
    stream_layout,
)

# /proc/<pid>/pagemap entries (little-endian u64). By the top byte: present (0x80), swapped (0x40),
# file page or shared anonymous (0x20). A private page is present and not the file's, or swapped
# out. But a swap entry of type 31 (the low 5 bits of the low byte) is a pte marker: no page at
# all, as a dirty log (dirtylog.py) leaves on the pages it write-protects before they are faulted.
_PRESENT_PRIVATE = bytes(1 if top & 0x80 and not top & 0x20 else 0 for top in range(256))
_SWAPPED = bytes(1 if top & 0x40 and not top & 0x80 else 0 for top in range(256))
_NOT_A_MARKER = bytes(0 if low & 0x1F == 0x1F else 1 for low in range(256))
_PRIVATE_RUN = re.compile(b"\x01+")

_CHUNK_PAGES = 256  # pages read from the process per batch: 2 iovecs each, one writev


@dataclass(frozen=True)
class DeltaResult:
    pages: int
    stream_bytes: int


class PageRun(NamedTuple):
    """Consecutive pages of guest RAM: where the process maps them, where the file holds them.
    (A tuple: a capture makes one per lone page written, thousands.)"""

    address: int
    file_offset: int
    length: int  # bytes, a multiple of PAGE_SIZE


@dataclass(frozen=True)
class RamMapping:
    """One mapping of the RAM file in the QEMU process."""

    address: int
    length: int
    file_offset: int

    def run(self, start: int, length: int) -> PageRun:
        """The pages [start, start + length) bytes into this mapping."""
        return PageRun(self.address + start, self.file_offset + start, length)


def write_delta(
    pid: int, memory: Path, base_state: Path, device_state: Path, out: Path,
    changed: Callable[[], list[PageRun]] | None = None,
) -> DeltaResult:
    """Write to `out` the stream that restores stopped QEMU `pid` onto `memory`, its RAM file:
    `base_state`'s RAM sections, the pages that differ from `memory`, `device_state`'s
    sections. Those pages are the ones the process holds privately, or those `changed` (a dirty
    log's `written`, when it has logged since QEMU mapped the file) names. Blocking; run it in
    a thread."""
    parts = ImageParts.read(base_state, device_state)
    runs = changed() if changed is not None else private_runs(pid, memory)
    return write_delta_stream(pid, parts, runs, out)


def write_delta_stream(
    pid: int, parts: ImageParts, runs: Iterable[PageRun], out: Path
) -> DeltaResult:
    """Write to `out` a delta stream of `parts` with the `runs` of QEMU `pid` (stopped, or a
    frozen copy of it) as its pages. Blocking.

    :raise CaptureFailed: the process's pages or the file could not be read or written.
    """
    section = parts.section_id
    fd = _create(out)
    try:
        _write_all(fd, [parts.head[:parts.first_end], part_section_start(section)])
        pages = _write_records(fd, _batches(pid, runs))
        _write_all(fd, [part_section_end(section), parts.head[parts.first_end:], parts.devices])
        size = os.fstat(fd).st_size
    except OSError as err:
        raise CaptureFailed(f"cannot write the delta capture of QEMU {pid}: {err}") from err
    finally:
        os.close(fd)
    return DeltaResult(pages, size)


def write_image(
    pid: int, parts: ImageParts, runs: Iterable[PageRun], out_memory: Path, out_state: Path
) -> DeltaResult:
    """Make a memory image of QEMU `pid` (stopped, or a frozen copy of it): its `runs` written
    over `out_memory`, and `out_state`, of the image's `parts`. `out_memory` already holds the
    rest: a copy of the RAM file (`copy_sparse`) with the process's private pages as `runs`, or
    an earlier image of the VM with the pages its dirty log names as written since. Blocking;
    run it in a thread."""
    try:
        pages = copy_pages(pid, runs, out_memory)
    except OSError as err:
        raise CaptureFailed(f"cannot write the memory image of QEMU {pid}: {err}") from err
    return DeltaResult(pages, write_state(parts, out_state))


def write_state(parts: ImageParts, out_state: Path) -> int:
    """An image's device state, of its `parts`; its size. Blocking."""
    try:
        state = _create(out_state)
        try:
            _write_all(state, [parts.head, parts.devices])
            return os.fstat(state).st_size
        finally:
            os.close(state)
    except OSError as err:
        raise CaptureFailed(f"cannot write the device state of a memory image: {err}") from err


def copy_pages(pid: int, runs: Iterable[PageRun], out_memory: Path) -> int:
    """Copy the `runs` of QEMU `pid`'s RAM to their offsets in `out_memory`; the pages copied.
    The file is mapped and the kernel reads the process straight into it, IOV_MAX runs per
    call: a guest's writes are mostly lone pages, and a write call each cost most of the time."""
    fd = os.open(out_memory, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        target = _map_shared(fd, size) if size else 0
    finally:
        os.close(fd)
    try:
        local, remote = array.array("Q"), array.array("Q")
        for run in runs:
            if run.file_offset + run.length > size:
                raise CaptureFailed(f"RAM pages at offset {run.file_offset} lie beyond the "
                               f"{size}-byte memory image")
            local.extend((target + run.file_offset, run.length))
            remote.extend((run.address, run.length))
        for start in range(0, len(local), 2 * IOV_MAX):
            _read_into(pid, local[start:start + 2 * IOV_MAX], remote[start:start + 2 * IOV_MAX])
    finally:
        if size:
            _munmap(target, size)
    return sum(local[1::2]) // PAGE_SIZE


def _read_into(pid: int, local: array.array[int], remote: array.array[int]) -> None:
    """One process_vm_readv: `remote`'s (address, length) pairs into `local`'s."""
    total, count = sum(local[1::2]), len(local) // 2
    done = _process_vm_readv(pid, local.buffer_info()[0], count, remote.buffer_info()[0],
                             count, 0)
    if done != total:
        error = os.strerror(ctypes.get_errno()) if done < 0 else f"{done} of {total} bytes"
        raise CaptureFailed(f"cannot read the memory of QEMU {pid}: {error}")


def _map_shared(fd: int, size: int) -> int:
    address = _mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"cannot map the memory image: "
                                          f"{os.strerror(ctypes.get_errno())}")
    return int(address)


def copy_sparse(source: Path, target: Path) -> None:
    """Copy `source`'s data to `target` (new, or empty at the same size), leaving its holes
    holes (the kernel copies; nothing passes through this process). Pages written over the
    copy afterwards cost far less than pages written into holes left for them: ext4 then
    only dirties cached pages, where it would allocate each page amid a thousand extents."""
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            size = os.fstat(src.fileno()).st_size
            for start, end in _data_extents(src.fileno(), size):
                while start < end:
                    start += os.copy_file_range(src.fileno(), fd, end - start, start, start)
            os.ftruncate(fd, size)
        finally:
            os.close(fd)


def _data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    position = 0
    while position < size:
        try:
            data = os.lseek(fd, position, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            return
        position = os.lseek(fd, data, os.SEEK_HOLE)
        yield data, position


@dataclass(frozen=True)
class ImageParts:
    """What a capture builds on: the base state's RAM sections (`head`) and the device
    sections QEMU saved (`devices`)."""

    section_id: int  # of the RAM section
    head: bytes
    first_end: int  # the end of the first RAM section in `head`
    devices: bytes

    @classmethod
    def read(cls, base_state: Path, device_state: Path) -> ImageParts:
        """Of the state a VM was restored from (`base_state`) and its device state now."""
        base = stream_layout(base_state)
        layout = stream_layout(device_state)
        if not base.ram_section_ends or base.ram_section_id is None:
            raise UnsupportedStream(f"{base_state.name} has no RAM sections to build on")
        if layout.ram_section_ends:
            raise UnsupportedStream(f"{device_state.name} holds RAM, not only device state")
        head = base_state.read_bytes()[:base.ram_section_ends[-1]]
        devices = device_state.read_bytes()[layout.sections_start:]
        return cls(base.ram_section_id, head, base.ram_section_ends[0], devices)


def _create(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)


def ram_mappings(pid: int, memory: Path) -> list[RamMapping]:
    """Where `memory` is mapped in the process, found by inode (its path may have changed)."""
    stat = memory.stat()
    found = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 5 or int(fields[4]) != stat.st_ino:
                continue
            major, minor = (int(part, 16) for part in fields[3].split(":"))
            if os.makedev(major, minor) != stat.st_dev:
                continue
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            found.append(RamMapping(start, end - start, int(fields[2], 16)))
    if not found:
        raise CaptureFailed(f"QEMU {pid} does not map {memory}")
    return found


def private_runs(pid: int, memory: Path) -> Iterator[PageRun]:
    """The runs of private pages where the process maps `memory` (found now, read lazily)."""
    return private_runs_in(pid, ram_mappings(pid, memory))


def private_runs_in(pid: int, mappings: list[RamMapping]) -> Iterator[PageRun]:
    """The runs of private pages in the process's `mappings` of its RAM file (read lazily)."""
    for mapping in mappings:
        for run in _PRIVATE_RUN.finditer(_private(page_map(pid, mapping))):
            yield mapping.run(run.start() * PAGE_SIZE, (run.end() - run.start()) * PAGE_SIZE)


def page_map(pid: int, mapping: RamMapping) -> bytes:
    """The process's /proc/<pid>/pagemap entries of `mapping`, one little-endian u64 a page.

    :raise CaptureFailed: a short read.
    :raise OSError: the page map cannot be read.
    """
    pages = mapping.length // PAGE_SIZE
    with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
        entries = os.pread(pagemap.fileno(), pages * 8, mapping.address // PAGE_SIZE * 8)
    if len(entries) != pages * 8:
        raise CaptureFailed(f"short read of the page map of QEMU {pid}")
    return entries


def _private(entries: bytes) -> bytes:
    """One byte per pagemap entry: 1 for a private page. Bytewise AND/OR as big integers."""
    top, low = entries[7::8], entries[0::8]
    present = int.from_bytes(top.translate(_PRESENT_PRIVATE))
    swapped = int.from_bytes(top.translate(_SWAPPED)) & int.from_bytes(low.translate(_NOT_A_MARKER))
    return (present | swapped).to_bytes(len(top))


def _batches(pid: int, runs: Iterable[PageRun]) -> Iterator[list[tuple[int, memoryview]]]:
    """(offset in the RAM file, pages) for `runs`, read from the process into one buffer in
    batches of as many runs as it holds (a guest's writes are mostly lone pages), one
    process_vm_readv each. Each next batch reuses the buffer."""
    buffer = bytearray(_CHUNK_PAGES * PAGE_SIZE)
    view = memoryview(buffer)
    pieces: list[PageRun] = []  # what the batch reads, packed into the buffer
    used = 0
    for run in runs:
        at = 0
        while at < run.length:
            if used == len(buffer) or len(pieces) == IOV_MAX:
                yield _read_batch(pid, buffer, view, pieces)
                pieces, used = [], 0
            length = min(len(buffer) - used, run.length - at)
            pieces.append(PageRun(run.address + at, run.file_offset + at, length))
            used += length
            at += length
    if pieces:
        yield _read_batch(pid, buffer, view, pieces)


def _read_batch(
    pid: int, buffer: bytearray, view: memoryview, pieces: list[PageRun]
) -> list[tuple[int, memoryview]]:
    total = sum(piece.length for piece in pieces)
    local = _Iovec(ctypes.addressof(ctypes.c_char.from_buffer(buffer)), total)
    remote = (_Iovec * len(pieces))(*(_Iovec(p.address, p.length) for p in pieces))
    done = _process_vm_readv(pid, ctypes.byref(local), 1, remote, len(pieces), 0)
    if done != total:
        error = os.strerror(ctypes.get_errno()) if done < 0 else f"{done} of {total} bytes"
        raise CaptureFailed(f"cannot read the memory of QEMU {pid}: {error}")
    batch, used = [], 0
    for piece in pieces:
        batch.append((piece.file_offset, view[used:used + piece.length]))
        used += piece.length
    return batch


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_process_vm_readv = _libc.process_vm_readv
_process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                              ctypes.c_ulong, ctypes.c_ulong]
_process_vm_readv.restype = ctypes.c_ssize_t
_mmap = _libc.mmap
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long]
_mmap.restype = ctypes.c_void_p
_MAP_FAILED = ctypes.c_void_p(-1).value
_munmap = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_munmap.restype = ctypes.c_int


def _write_records(fd: int, batches: Iterator[list[tuple[int, memoryview]]]) -> int:
    """One PAGE record per page; the first names the block, the rest continue it."""
    block: bytes | None = MEMORY_BACKEND_ID.encode()
    written = 0
    for batch in batches:
        iov: list[bytes | memoryview] = []
        for offset, pages in batch:
            for at in range(0, len(pages), PAGE_SIZE):
                iov.append(page_record_header(offset + at, block))
                iov.append(pages[at:at + PAGE_SIZE])
                block = None
            written += len(pages) // PAGE_SIZE
        _write_all(fd, iov)
    return written


def _write_all(fd: int, buffers: list[bytes | memoryview]) -> None:
    for start in range(0, len(buffers), IOV_MAX):
        batch = buffers[start:start + IOV_MAX]
        expected = sum(len(b) for b in batch)
        done = os.writev(fd, batch)
        if done != expected:  # regular files only write short on error (ENOSPC...)
            raise OSError(f"short write ({done} of {expected} bytes)")

