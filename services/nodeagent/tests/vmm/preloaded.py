"""A real process under the QEMU preload library (compiled here with the node's gcc): it maps a
file copy-on-write through libc's mmap, as QEMU maps its RAM file, and writes pages on request."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from aenv_nodeagent.vmm.delta import PageRun, RamMapping, ram_mappings
from aenv_nodeagent.vmm.stream import PAGE_SIZE

PAGES = 64
# Maps argv[1] copy-on-write, advises the kernel not to fork the mapping (as QEMU does for guest
# RAM), then writes the page each line of stdin names, answering "ok" after each.
_WRITER = """
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    ram = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
ram.madvise(mmap.MADV_DONTFORK)
print("ok", flush=True)
for line in sys.stdin:
    n = int(line)
    ram[n * 4096:(n + 1) * 4096] = bytes([0x80 + n]) * 4096
    print("ok", flush=True)
"""


class Writer:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def write(self, *page_numbers: int) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        for n in page_numbers:
            self.proc.stdin.write(f"{n}\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == "ok\n"

    def mapping(self, memory: Path) -> RamMapping:
        (mapping,) = ram_mappings(self.proc.pid, memory)
        return mapping


def fill(memory: Path) -> Path:
    """`memory`: PAGES pages, page n filled with byte n."""
    memory.write_bytes(b"".join(bytes([n]) * PAGE_SIZE for n in range(PAGES)))
    return memory


def start_writer(memory: Path, env: dict[str, str], pass_fds: Sequence[int] = ()
                 ) -> Iterator[Writer]:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(memory)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, **env}, pass_fds=tuple(pass_fds))
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ok\n"
        yield Writer(proc)
    finally:
        proc.kill()
        proc.wait()


def page_numbers(runs: list[PageRun]) -> list[int]:
    return [run.file_offset // PAGE_SIZE + i
            for run in runs for i in range(run.length // PAGE_SIZE)]
