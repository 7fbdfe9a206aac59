"""The stand-in for QEMU's disassembler library (vmm/no_disassembler.c), built beside the preload
library when this host's QEMU links one: what QEMU needs of it is read from its ELF headers
(binutils, which the C compiler brings), so another distribution's QEMU gets a stand-in under
its own soname, or none when it imports a function the stand-in lacks."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.vmm.preload import NO_DISASSEMBLER_NAME, NO_DISASSEMBLER_SOURCE

from .proc import require_tool, run

log = logging.getLogger(__name__)

_NEEDED = re.compile(rb"\(NEEDED\)\s+Shared library: \[(libcapstone\.so[^\]]*)\]")


@dataclass(frozen=True)
class DisassemblerNeeds:
    """The disassembler library QEMU needs (its soname) and the functions it imports of it."""

    soname: str
    functions: tuple[str, ...]

    def cache_text(self) -> str:
        return f"{self.soname}:{','.join(self.functions)}"


async def disassembler_needs(qemu: str) -> DisassemblerNeeds | None:
    """What `qemu` (a path) needs of a disassembler library; None when it links none.

    :raise Internal: readelf or nm failed on it.
    """
    headers = await run([require_tool("readelf"), "--dynamic", qemu])
    if (needed := _NEEDED.search(headers)) is None:
        return None
    imported = await run([require_tool("nm"), "--dynamic", "--undefined-only", qemu])
    functions = sorted({m.decode() for m in re.findall(rb"\bU (cs_\w+)", imported)})
    return DisassemblerNeeds(needed[1].decode(), tuple(functions))


async def build_no_disassembler(compiler: str, needs: DisassemblerNeeds, out: Path) -> bool:
    """Compile the stand-in into `out` under QEMU's soname; False (and nothing built) when it
    does not define every function QEMU imports: QEMU binds them all at start.

    :raise Internal: the compiler or nm failed.
    """
    library = out / NO_DISASSEMBLER_NAME
    await run([compiler, "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
               f"-Wl,-soname,{needs.soname}", "-o", library, NO_DISASSEMBLER_SOURCE])
    defined = await run([require_tool("nm"), "--dynamic", "--defined-only", library])
    missing = set(needs.functions) - {
        m.decode() for m in re.findall(rb"\bT (cs_\w+)", defined)}
    if missing:
        library.unlink()
        log.warning("QEMU keeps its disassembler library: the stand-in lacks what it imports",
                    extra={"soname": needs.soname, "missing": sorted(missing)})
        return False
    return True
