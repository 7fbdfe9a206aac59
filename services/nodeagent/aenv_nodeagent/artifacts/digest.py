"""The digest of an artifact's bytes, not of its inputs.

Cache keys name what an artifact is built from; two hosts building the same inputs still get
different bytes (mkfs picks UUIDs and hash seeds, packages carry build times). What must be
byte for byte alike — the disks under a captured guest whose page cache remembers their blocks
— is compared by this digest. A built artifact is never written again, so its digest is kept
beside it (`<file>.sha256`, with the size and mtime it was taken at) and hashed once per host.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from pathlib import Path

SUFFIX = ".sha256"


async def content_digest(path: Path) -> str:
    """sha256 of the file's bytes, "sha256:<hex>" (from its kept digest when still current).

    :raise OSError: the file cannot be read.
    """
    return await asyncio.to_thread(_content_digest, path)


def _content_digest(path: Path) -> str:
    stat = path.stat()
    stamp = f"{stat.st_size} {stat.st_mtime_ns}"
    kept = path.with_name(path.name + SUFFIX)
    try:
        recorded_stamp, _, digest = kept.read_text().rpartition(" ")
        if recorded_stamp == stamp and digest.startswith("sha256:"):
            return digest
    except OSError:
        pass
    with path.open("rb") as file:
        digest = "sha256:" + hashlib.file_digest(file, "sha256").hexdigest()
    _keep(kept, f"{stamp} {digest}")
    return digest


def _keep(kept: Path, line: str) -> None:
    """Written whole or not at all (other node agents on this host read it meanwhile); a
    folder we may not write to only costs the next caller a hash."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".digest-", dir=kept.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as out:
            out.write(line)
        os.replace(tmp, kept)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
