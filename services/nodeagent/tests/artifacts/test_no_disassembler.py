"""The stand-in for QEMU's disassembler library, built against this host's QEMU."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.no_disassembler import (
    DisassemblerNeeds,
    build_no_disassembler,
    disassembler_needs,
)
from aenv_nodeagent.artifacts.proc import require_tool
from aenv_nodeagent.vmm.argv import QEMU_BINARY
from aenv_nodeagent.vmm.preload import LIBRARY_NAME, NO_DISASSEMBLER_NAME, preloaded


def _needs() -> DisassemblerNeeds:
    needs = asyncio.run(disassembler_needs(require_tool(QEMU_BINARY)))
    if needs is None:
        pytest.skip("this host's QEMU links no disassembler library")
    return needs


def test_the_stand_in_takes_qemus_soname_and_defines_what_it_imports(tmp_path: Path) -> None:
    needs = _needs()
    assert needs.soname.startswith("libcapstone.so") and "cs_open" in needs.functions

    assert asyncio.run(build_no_disassembler(require_tool("gcc"), needs, tmp_path))

    built = tmp_path / NO_DISASSEMBLER_NAME
    dynamic = subprocess.run(["readelf", "--dynamic", built], capture_output=True, text=True,
                             check=True).stdout
    assert f"Library soname: [{needs.soname}]" in dynamic
    # The dynamic loader takes it for QEMU's library: QEMU starts, maps no other.
    qemu = subprocess.run([QEMU_BINARY, "-version"], capture_output=True, text=True,
                          env={"LD_PRELOAD": str(built), "LD_DEBUG": "libs"}, check=True)
    assert "QEMU emulator" in qemu.stdout
    assert "libcapstone" not in qemu.stderr


def test_no_stand_in_when_qemu_imports_what_it_lacks(tmp_path: Path) -> None:
    needs = dataclasses.replace(_needs(), functions=(*_needs().functions, "cs_regs_access"))
    assert not asyncio.run(build_no_disassembler(require_tool("gcc"), needs, tmp_path))
    assert not (tmp_path / NO_DISASSEMBLER_NAME).exists()


def test_qemu_preloads_the_stand_in_first_when_it_was_built(tmp_path: Path) -> None:
    library = tmp_path / LIBRARY_NAME
    library.touch()
    assert preloaded(library) == [library]
    (tmp_path / NO_DISASSEMBLER_NAME).touch()
    assert preloaded(library) == [tmp_path / NO_DISASSEMBLER_NAME, library]
