"""Which file a process maps its guest RAM from, read from real processes: what its command
line names, or the file mapped in its place at the RAM's size (a remapped pre-started VM)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from aenv_nodeagent.vmm.errors import CaptureFailed
from aenv_nodeagent.vmm.ram_file import mapped_memory

# Maps the file named after "--map" privately and writable, as QEMU its RAM, then waits.
_MAPPER = """
import mmap, sys
args = sys.argv[1:]
if "--map" in args:
    file = open(args[args.index("--map") + 1], "rb")
    ram = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_PRIVATE,
                    prot=mmap.PROT_READ | mmap.PROT_WRITE)
print("ready", flush=True)
sys.stdin.read()
"""


def _backend(path: Path, size: str = "1M") -> str:
    named = str(path).replace(",", ",,")
    return f"memory-backend-file,id=mem,size={size},mem-path={named},share=off"


def test_the_memory_file_is_read_from_the_command_line() -> None:
    with _mapping("-object", _backend(Path("/var/a,b/memory"))) as pid:
        assert mapped_memory(pid) == Path("/var/a,b/memory")
    with _mapping() as pid, pytest.raises(CaptureFailed, match="no file-backed memory backend"):
        mapped_memory(pid)


def test_a_file_mapped_at_the_rams_size_in_place_of_the_named_one_is_the_ram(
    tmp_path: Path,
) -> None:
    launched, image, small = tmp_path / "template", tmp_path / "image", tmp_path / "small"
    for path, size in ((launched, 1 << 20), (image, 1 << 20), (small, 1 << 16)):
        path.write_bytes(b"\1" * size)
    with _mapping("-object", _backend(launched), "--map", str(image)) as pid:
        assert mapped_memory(pid) == image
    with _mapping("-object", _backend(launched), "--map", str(launched)) as pid:
        assert mapped_memory(pid) == launched
    # Not the RAM's size: not the RAM.
    with _mapping("-object", _backend(launched), "--map", str(small)) as pid:
        assert mapped_memory(pid) == launched
    # Deleted since: its /proc name names no file, so nothing reads a stranger's.
    with _mapping("-object", _backend(launched), "--map", str(image)) as pid:
        image.unlink()
        assert not mapped_memory(pid).exists()


@contextmanager
def _mapping(*args: str) -> Iterator[int]:
    """A process with `args` on its command line, mapping the file after "--map", until the
    block ends."""
    proc = subprocess.Popen([sys.executable, "-c", _MAPPER, *args], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
