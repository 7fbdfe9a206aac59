"""Which file a QEMU maps its guest RAM from: its memory backend's mem-path, or the memory image
a remap (vmm/dirtylog.c, `QemuVm.repoint`) mapped in its place before the guest first ran. The
command line still names the first; the process's mappings tell the second."""

from __future__ import annotations

import re
from pathlib import Path

from aenv_nodeagent.vmm.argv import MEMORY_BACKEND_ID
from aenv_nodeagent.vmm.errors import CaptureFailed

_SIZE = re.compile(r"(\d+)([KMGT]?)$")


def mapped_memory(pid: int) -> Path:
    """The file QEMU `pid` maps its guest RAM from (as this host names it).

    :raise CaptureFailed: QEMU has no file-backed memory backend, or is gone."""
    memory, size = _backend(pid)
    return _remapped(pid, memory, size) or memory


def _backend(pid: int) -> tuple[Path, int]:
    """The backend's mem-path and size in bytes (0: not given) on QEMU's command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError as err:
        raise CaptureFailed(f"cannot read the command line of QEMU {pid}: {err}") from err
    for arg in argv:
        options = _options(arg)
        if options.get("id") == MEMORY_BACKEND_ID and "mem-path" in options:
            return Path(options["mem-path"]), _bytes(options.get("size", ""))
    raise CaptureFailed(f"QEMU {pid} has no file-backed memory backend {MEMORY_BACKEND_ID!r}")


def _remapped(pid: int, memory: Path, size: int) -> Path | None:
    """Another file mapped privately over a range of the RAM's size, if one is (QEMU maps no
    other file that large): the image a remap put there."""
    try:
        launched = memory.stat().st_ino
    except OSError:
        launched = -1
    spans: dict[tuple[str, int], int] = {}
    names: dict[tuple[str, int], str] = {}
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                fields = line.rstrip("\n").split(maxsplit=5)
                if len(fields) < 6 or fields[4] == "0" or not fields[1].endswith("p"):
                    continue
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                key = (fields[3], int(fields[4]))
                spans[key] = spans.get(key, 0) + end - start
                names[key] = fields[5]
    except OSError as err:
        raise CaptureFailed(f"cannot read the mappings of QEMU {pid}: {err}") from err
    found = [names[key] for key, span in spans.items()
             if size and span == size and key[1] != launched]
    # A file deleted since keeps the name /proc gives it ("... (deleted)"), which names none.
    return Path(found[0]) if len(found) == 1 else None


def _bytes(size: str) -> int:
    match = _SIZE.match(size)
    if match is None:
        return 0
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[match[2]]


def _options(arg: str) -> dict[str, str]:
    """QEMU's key=value,... syntax, where ',,' is a literal comma."""
    parts = arg.replace(",,", "\0").split(",")
    pairs = (part.replace("\0", ",").partition("=") for part in parts)
    return {key: value for key, sep, value in pairs if sep}
