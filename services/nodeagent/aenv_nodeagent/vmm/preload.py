"""The library preloaded into every QEMU that maps its RAM file copy-on-write: its dirty log
(`dirtylog.c`, read by dirtylog.py) and its frozen copies (`freeze.c`, asked for by frozen.py).
It is compiled on the node (artifacts/preload.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from aenv_nodeagent.vmm.dirtylog import MEMORY_ENV
from aenv_nodeagent.vmm.frozen import FREEZE_FD_ENV

SOURCES = (Path(__file__).with_name("dirtylog.c"), Path(__file__).with_name("freeze.c"))
LIBRARY_NAME = "libaenv-qemu.so"


def preload_env(
    library: Path, memory: Path, freeze_socket: socket.socket | None = None
) -> dict[str, str]:
    """The environment that makes QEMU log writes to its mapping of `memory`, and serve frozen
    copies on `freeze_socket` (inherited)."""
    env = {"LD_PRELOAD": str(library), MEMORY_ENV: str(memory)}
    if freeze_socket is not None:
        env[FREEZE_FD_ENV] = str(freeze_socket.fileno())
    return env
