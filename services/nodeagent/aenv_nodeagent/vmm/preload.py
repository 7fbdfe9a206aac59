"""The library preloaded into every QEMU of a node. In one that maps its RAM file copy-on-write:
its dirty log (`dirtylog.c`, read by dirtylog.py), its frozen copies (`freeze.c`, asked for by
frozen.py), the RAM file opened read-only where a jailed QEMU may not write it (`memfile.c`).
In any jailed QEMU: a seccomp filter that kills any exec or fork but the frozen copies'
(`execfilter.c`, asked for by jail.py). Preloaded before it, when built: a stand-in for QEMU's
disassembler library (`no_disassembler.c`), which saves each QEMU 1.4 MiB. Both are compiled
on the node (artifacts/preload.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from aenv_nodeagent.vmm.dirtylog import MEMORY_ENV
from aenv_nodeagent.vmm.frozen import FREEZE_FD_ENV

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("dirtylog.c", "freeze.c", "memfile.c", "execfilter.c"))
LIBRARY_NAME = "libaenv-qemu.so"
NO_DISASSEMBLER_SOURCE = Path(__file__).with_name("no_disassembler.c")
NO_DISASSEMBLER_NAME = "libaenv-no-disassembler.so"  # beside LIBRARY_NAME, when built


MEMORY_FD_ENV = "AENV_MEMORY_FD"


def preload_env(
    library: Path, memory: Path, freeze_socket: socket.socket | None = None, *,
    memory_fd: int | None = None,
) -> dict[str, str]:
    """The environment that makes QEMU log writes to its mapping of `memory`, serve frozen
    copies on `freeze_socket` (inherited), and open `memory` as `memory_fd` (read-only,
    inherited: memfile.c)."""
    env = {**exec_filter_env(library), MEMORY_ENV: str(memory)}
    if memory_fd is not None:
        env[MEMORY_FD_ENV] = str(memory_fd)
    if freeze_socket is not None:
        env[FREEZE_FD_ENV] = str(freeze_socket.fileno())
    return env


def exec_filter_env(library: Path) -> dict[str, str]:
    """The environment of a QEMU mapping its RAM share=on: the library serves it only its exec
    filter, when the jail asks for it; every other part of it stays idle."""
    return {"LD_PRELOAD": " ".join(str(path) for path in preloaded(library))}


def preloaded(library: Path) -> list[Path]:
    """What a QEMU preloads with `library`: the disassembler's stand-in first, when built (the
    dynamic loader then takes it for the library QEMU needs under that soname)."""
    stand_in = library.with_name(NO_DISASSEMBLER_NAME)
    return [stand_in, library] if stand_in.is_file() else [library]
