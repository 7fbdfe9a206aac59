"""The library preloaded into copy-on-write QEMUs (vmm/preload.py), compiled on the node with
its C compiler and cached by the sources and the compiler's version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.preload import LIBRARY_NAME, SOURCES

from .cache import CacheEntry, CacheKey, cached_build
from .proc import require_tool, run


@dataclass(frozen=True)
class PreloadLibrary:
    path: Path
    entry: CacheEntry


async def ensure_preload_library(cache_dir: Path) -> PreloadLibrary:
    compiler = require_tool("gcc")
    version = (await run([compiler, "-dumpfullversion"])).decode().strip()
    key = CacheKey("qemu-preload").add("gcc", version)
    for source in SOURCES:
        key = key.add_file(source.name, source)
    digest = key.hexdigest()[:24]

    async def build(out: Path) -> None:
        await run([compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                   "-o", out / LIBRARY_NAME, *SOURCES, "-ldl", "-lpthread"])

    entry = await cached_build(cache_dir, "qemu-preload", digest, build)
    return PreloadLibrary(entry.path / LIBRARY_NAME, entry)
