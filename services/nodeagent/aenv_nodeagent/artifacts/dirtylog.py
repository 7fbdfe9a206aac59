"""The write-logging library preloaded into copy-on-write QEMUs (vmm/dirtylog.c), compiled on
the node with its C compiler and cached by the source and the compiler's version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.dirtylog import LIBRARY_NAME, SOURCE

from .cache import CacheEntry, CacheKey, cached_build
from .proc import require_tool, run


@dataclass(frozen=True)
class DirtyLogLibrary:
    path: Path
    entry: CacheEntry


async def ensure_dirty_log_library(cache_dir: Path) -> DirtyLogLibrary:
    compiler = require_tool("gcc")
    version = (await run([compiler, "-dumpfullversion"])).decode().strip()
    key = CacheKey("dirtylog").add_file("source", SOURCE).add("gcc", version).hexdigest()[:24]

    async def build(out: Path) -> None:
        await run([compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                   "-o", out / LIBRARY_NAME, SOURCE, "-ldl"])

    entry = await cached_build(cache_dir, "dirtylog", key, build)
    return DirtyLogLibrary(entry.path / LIBRARY_NAME, entry)
