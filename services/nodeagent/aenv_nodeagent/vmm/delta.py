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

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Internal
from aenv_nodeagent.vmm.argv import MEMORY_BACKEND_ID
from aenv_nodeagent.vmm.stream import PAGE_SIZE, UnsupportedStream, stream_layout

# /proc/<pid>/pagemap entries, by their top byte: present (0x80), swapped (0x40), file page or
# shared anonymous (0x20). A private page is present and not the file's, or swapped out.
_PRIVATE_BY_TOP_BYTE = bytes(
    1 if top & 0x40 or (top & 0x80 and not top & 0x20) else 0 for top in range(256))
_PRIVATE_RUN = re.compile(b"\x01+")

# Stream records (migration/ram.c, savevm.c), as in vmm/stream.py.
_PAGE, _EOS, _CONTINUE = 0x08, 0x10, 0x20
_SECTION_PART, _SECTION_FOOTER = 0x02, 0x7E
_U64 = struct.Struct(">Q")
_SECTION = struct.Struct(">BI")

_IOV_MAX = 1024
_CHUNK_PAGES = 256  # pages read from the process at a time: 2 iovecs each, one writev
_BLOCK_NAME = MEMORY_BACKEND_ID.encode()


@dataclass(frozen=True)
class DeltaResult:
    pages: int
    stream_bytes: int


@dataclass(frozen=True)
class _Mapping:
    """One mapping of the RAM file in the QEMU process."""

    address: int
    length: int
    file_offset: int


def mapped_memory(pid: int) -> Path:
    """The file QEMU `pid` maps its guest RAM from (its memory backend's mem-path)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError as err:
        raise Internal(f"cannot read the command line of QEMU {pid}: {err}") from err
    for arg in argv:
        options = _options(arg)
        if options.get("id") == MEMORY_BACKEND_ID and "mem-path" in options:
            return Path(options["mem-path"])
    raise Internal(f"QEMU {pid} has no file-backed memory backend {MEMORY_BACKEND_ID!r}")


def _options(arg: str) -> dict[str, str]:
    """QEMU's key=value,... syntax, where ',,' is a literal comma."""
    parts = arg.replace(",,", "\0").split(",")
    pairs = (part.replace("\0", ",").partition("=") for part in parts)
    return {key: value for key, sep, value in pairs if sep}


def write_delta(
    pid: int, memory: Path, base_state: Path, device_state: Path, out: Path
) -> DeltaResult:
    """Write to `out` the stream that restores stopped QEMU `pid` onto `memory`, its RAM file:
    `base_state`'s RAM sections, the pages the process holds privately, `device_state`'s
    sections. Blocking; run it in a thread."""
    base = stream_layout(base_state)
    devices = stream_layout(device_state)
    if not base.ram_section_ends or base.ram_section_id is None:
        raise UnsupportedStream(f"{base_state.name} has no RAM sections to build on")
    if devices.ram_section_ends:
        raise UnsupportedStream(f"{device_state.name} holds RAM, not only device state")
    mappings = _mappings(pid, memory)
    head = base_state.read_bytes()[:base.ram_section_ends[-1]]
    first_end = base.ram_section_ends[0]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as process_memory:
            _write_all(fd, [head[:first_end], _SECTION.pack(_SECTION_PART, base.ram_section_id)])
            pages = _write_private_pages(fd, process_memory.fileno(), pid, mappings)
        _write_all(fd, [_U64.pack(_EOS), _SECTION.pack(_SECTION_FOOTER, base.ram_section_id),
                        head[first_end:]])
        with open(device_state, "rb") as source:
            source.seek(devices.sections_start)
            _write_all(fd, [source.read()])
        size = os.fstat(fd).st_size
    except OSError as err:
        raise Internal(f"cannot write the delta capture of QEMU {pid}: {err}") from err
    finally:
        os.close(fd)
    return DeltaResult(pages, size)


def _mappings(pid: int, memory: Path) -> list[_Mapping]:
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
            found.append(_Mapping(start, end - start, int(fields[2], 16)))
    if not found:
        raise Internal(f"QEMU {pid} does not map {memory}")
    return found


def _private_runs(pid: int, mapping: _Mapping) -> Iterator[tuple[int, int]]:
    """(first page, page count) of each run of private pages of `mapping`."""
    pages = mapping.length // PAGE_SIZE
    with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
        entries = os.pread(pagemap.fileno(), pages * 8, mapping.address // PAGE_SIZE * 8)
    if len(entries) != pages * 8:
        raise Internal(f"short read of the page map of QEMU {pid}")
    private = entries[7::8].translate(_PRIVATE_BY_TOP_BYTE)  # little-endian: byte 7 is the top
    for run in _PRIVATE_RUN.finditer(private):
        yield run.start(), run.end() - run.start()


def _write_private_pages(fd: int, process_memory: int, pid: int,
                         mappings: list[_Mapping]) -> int:
    """One PAGE record per private page; the first names the block, the rest continue it."""
    buffer = bytearray(_CHUNK_PAGES * PAGE_SIZE)
    view = memoryview(buffer)
    named = False
    written = 0
    for mapping in mappings:
        for first, count in _private_runs(pid, mapping):
            for chunk in range(first, first + count, _CHUNK_PAGES):
                n = min(_CHUNK_PAGES, first + count - chunk)
                length = n * PAGE_SIZE
                if os.preadv(process_memory, [view[:length]],
                             mapping.address + chunk * PAGE_SIZE) != length:
                    raise Internal(f"short read of the memory of QEMU {pid}")
                offset = mapping.file_offset + chunk * PAGE_SIZE
                iov: list[bytes | memoryview] = []
                for i in range(n):
                    if named:
                        iov.append(_U64.pack((offset + i * PAGE_SIZE) | _PAGE | _CONTINUE))
                    else:
                        iov.append(_U64.pack(offset | _PAGE) + bytes([len(_BLOCK_NAME)])
                                   + _BLOCK_NAME)
                        named = True
                    iov.append(view[i * PAGE_SIZE:(i + 1) * PAGE_SIZE])
                _write_all(fd, iov)
                written += n
    return written


def _write_all(fd: int, buffers: list[bytes | memoryview]) -> None:
    for start in range(0, len(buffers), _IOV_MAX):
        batch = buffers[start:start + _IOV_MAX]
        expected = sum(len(b) for b in batch)
        done = os.writev(fd, batch)
        if done != expected:  # regular files only write short on error (ENOSPC...)
            raise OSError(f"short write ({done} of {expected} bytes)")

