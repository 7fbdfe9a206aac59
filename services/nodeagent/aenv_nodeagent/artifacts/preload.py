"""The library preloaded into copy-on-write QEMUs (vmm/preload.py), and the stand-in for QEMU's
disassembler library beside it (artifacts/no_disassembler.py), compiled on the node with its C
compiler and cached by the sources, the compiler's version and what QEMU needs of a
disassembler."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.argv import QEMU_BINARY
from aenv_nodeagent.vmm.preload import LIBRARY_NAME, NO_DISASSEMBLER_SOURCE, SOURCES

from .cache import CacheEntry, CacheKey, cached_build
from .no_disassembler import build_no_disassembler, disassembler_needs
from .proc import require_tool, run


@dataclass(frozen=True)
class PreloadLibrary:
    path: Path
    entry: CacheEntry


async def ensure_preload_library(cache_dir: Path) -> PreloadLibrary:
    compiler = require_tool("gcc")
    version = (await run([compiler, "-dumpfullversion"])).decode().strip()
    needs = await disassembler_needs(require_tool(QEMU_BINARY))
    key = CacheKey("qemu-preload").add("gcc", version)
    for source in (*SOURCES, NO_DISASSEMBLER_SOURCE):
        key = key.add_file(source.name, source)
    key = key.add("disassembler", needs.cache_text() if needs is not None else "")
    digest = key.hexdigest()[:24]

    async def build(out: Path) -> None:
        await run([compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                   "-o", out / LIBRARY_NAME, *SOURCES, "-ldl", "-lpthread"])
        if needs is not None:
            await build_no_disassembler(compiler, needs, out)

    entry = await cached_build(cache_dir, "qemu-preload", digest, build)
    return PreloadLibrary(entry.path / LIBRARY_NAME, entry)
