"""Delta captures from a real process that maps a file copy-on-write, on streams built here.

That QEMU loads such a delta and the guest comes back intact is tested by every pause in the
lifecycle VM tests.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from aenv_nodeagent.vmm.delta import (
    ImageParts,
    copy_pages,
    copy_sparse,
    private_runs,
    write_delta,
    write_image,
)
from aenv_nodeagent.vmm.errors import CaptureFailed
from aenv_nodeagent.vmm.stream import IOV_MAX, PAGE_SIZE, UnsupportedStream, stream_layout

from .test_stream import CONTINUE, DEVICES, PAGE, Stream, eos, name, page, part


def base_state() -> bytes:
    """A template's device state: the block list, a ROM block's page, no page of `mem`."""
    s = Stream({b"mem": 8 * PAGE_SIZE, b"rom": PAGE_SIZE})
    return (s.header() + part() + s.record(b"rom", 0, page(0x77)) + eos()
            + part(0x03) + eos() + DEVICES)


def device_state() -> bytes:
    config = b"\x07" + struct.pack(">I", 7) + b"microvm"
    return b"QEVM" + struct.pack(">I", 3) + config + DEVICES


def test_a_delta_carries_the_private_pages_between_the_base_and_the_device_state(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    (tmp_path / "base").write_bytes(base := base_state())
    (tmp_path / "devices").write_bytes(device_state())
    result = write_delta(dirtier.pid, memory, tmp_path / "base", tmp_path / "devices",
                         tmp_path / "delta")
    assert result.pages == 2  # the two it wrote; the one it only read is still the file's
    layout = stream_layout(tmp_path / "base")
    first, last = layout.ram_section_ends[0], layout.ram_section_ends[-1]
    delta_section = (
        part() + struct.pack(">Q", 1 * PAGE_SIZE | PAGE) + name(b"mem") + page(0xA1)
        + struct.pack(">Q", 5 * PAGE_SIZE | PAGE | CONTINUE) + page(0xA5) + eos())
    expected = base[:first] + delta_section + base[first:last] + DEVICES
    assert (tmp_path / "delta").read_bytes() == expected
    assert result.stream_bytes == len(expected)
    assert stream_layout(tmp_path / "delta").ram_section_ends[-1] == len(expected) - len(DEVICES)


def test_the_mapping_is_found_after_the_file_was_renamed(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    (tmp_path / "base").write_bytes(base_state())
    (tmp_path / "devices").write_bytes(device_state())
    pinned = memory.rename(tmp_path / "base.memory")
    result = write_delta(dirtier.pid, pinned, tmp_path / "base", tmp_path / "devices",
                         tmp_path / "delta")
    assert result.pages == 2


def test_streams_that_do_not_fit_are_refused(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    (tmp_path / "devices").write_bytes(device_state())
    (tmp_path / "base").write_bytes(base_state())
    with pytest.raises(UnsupportedStream, match="no RAM sections"):
        write_delta(dirtier.pid, memory, tmp_path / "devices", tmp_path / "devices",
                    tmp_path / "delta")
    with pytest.raises(UnsupportedStream, match="not only device state"):
        write_delta(dirtier.pid, memory, tmp_path / "base", tmp_path / "base",
                    tmp_path / "delta")
    other = tmp_path / "other"
    other.write_bytes(page(0))
    with pytest.raises(CaptureFailed, match="does not map"):
        write_delta(dirtier.pid, other, tmp_path / "base", tmp_path / "devices",
                    tmp_path / "delta")


def test_an_image_is_the_copied_base_with_the_private_pages_written_over_it(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    (tmp_path / "base").write_bytes(base := base_state())
    (tmp_path / "devices").write_bytes(device_state())
    image = tmp_path / "image"
    copy_sparse(memory, image)
    assert image.read_bytes() == memory.read_bytes()
    parts = ImageParts.read(tmp_path / "base", tmp_path / "devices")
    result = write_image(dirtier.pid, parts, private_runs(dirtier.pid, memory), image,
                         tmp_path / "image.state")
    assert result.pages == 2
    fills = [0, 0xA1, 2, 3, 4, 0xA5, 6, 7]
    assert image.read_bytes() == b"".join(page(fill) for fill in fills)
    last = stream_layout(tmp_path / "base").ram_section_ends[-1]
    assert (tmp_path / "image.state").read_bytes() == base[:last] + DEVICES


# Maps argv[1] copy-on-write and writes every other page (lone pages, as a guest's writes are).
_SCATTERED = """
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    ram = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
for n in range(0, len(ram) // 4096, 2):
    ram[n * 4096:n * 4096 + 8] = n.to_bytes(8, "little")
print("ready", flush=True)
sys.stdin.read()
"""


def test_pages_are_copied_in_batches_of_iov_max_runs(tmp_path: Path) -> None:
    pages = 4 * IOV_MAX + 6  # 2 * IOV_MAX + 3 lone runs: three calls, the last one short
    memory = tmp_path / "memory"
    memory.write_bytes(b"\xee" * pages * PAGE_SIZE)
    proc = subprocess.Popen([sys.executable, "-c", _SCATTERED, str(memory)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        runs = list(private_runs(proc.pid, memory))
        out = tmp_path / "image"
        out.write_bytes(bytes(pages * PAGE_SIZE))
        assert copy_pages(proc.pid, runs, out) == pages // 2
    finally:
        proc.kill()
        proc.wait()
    assert len(runs) == pages // 2
    image = out.read_bytes()
    for n in range(pages):
        written = n.to_bytes(8, "little") + b"\xee" * (PAGE_SIZE - 8)
        assert image[n * PAGE_SIZE:(n + 1) * PAGE_SIZE] == (
            written if n % 2 == 0 else bytes(PAGE_SIZE)), n


def test_pages_beyond_the_image_are_refused(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    short = tmp_path / "image"
    short.write_bytes(bytes(4 * PAGE_SIZE))  # page 5 was written: it lies beyond
    with pytest.raises(CaptureFailed, match="beyond"):
        copy_pages(dirtier.pid, private_runs(dirtier.pid, memory), short)
    assert short.read_bytes() == bytes(4 * PAGE_SIZE)


def test_a_sparse_copy_keeps_its_holes(tmp_path: Path) -> None:
    source = tmp_path / "source"
    with source.open("wb") as fh:
        fh.truncate(1024 * PAGE_SIZE)
        fh.seek(3 * PAGE_SIZE)
        fh.write(page(9))
    copy_sparse(source, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    assert (tmp_path / "copy").stat().st_blocks * 512 <= 16 * PAGE_SIZE
