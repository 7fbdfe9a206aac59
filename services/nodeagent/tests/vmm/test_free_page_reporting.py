"""Balloon free page reporting against the RAM file, with a guest that frees 64 MiB on cue.

A VM that owns its RAM file (share=on) returns freed memory as holes in the file. A copy-on-write
child (share=off) returns its private copies of the freed pages and never touches the file its
siblings and later restores map (QEMU 7.2 would punch holes into it, but for the seccomp filter
of vmm/seccomp.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from pathlib import Path

import pytest

from aenv_nodeagent.vmm import VmSpec

from .conftest import Launcher
from .guest import GuestKernel, wait_for_tick, write_memory_churner_initramfs

pytestmark = pytest.mark.vm

BOOT_LIMIT_S = 90.0
FREE_AT_TICK = 30
# The guest reports free pages about 2 s after freeing them; leave it ample time.
WATCH_S = 12.0


def allocated_kib(path: Path) -> int:
    return path.stat().st_blocks // 2


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def watch_for_holes(ram_file: Path, console_log: Path, watch_s: float) -> bool:
    """After the guest printed FREED, True as soon as the RAM file lost allocated blocks."""
    await wait_for_tick(console_log, at_least=FREE_AT_TICK + 1, time_limit=BOOT_LIMIT_S)
    assert "FREED" in console_log.read_text()
    before = allocated_kib(ram_file)
    for _ in range(int(watch_s / 0.2)):
        if allocated_kib(ram_file) < before - 16 * 1024:
            return True
        await asyncio.sleep(0.2)
    return False


@pytest.fixture
def churner_spec(
    ticker_spec: VmSpec, guest_kernel: GuestKernel, scratch: Path
) -> VmSpec:
    initrd = write_memory_churner_initramfs(scratch / "churner.cpio", guest_kernel, FREE_AT_TICK)
    return dataclasses.replace(ticker_spec, initrd=initrd, memory_mib=256)


async def test_owner_vm_returns_freed_memory_to_host(
    launch: Launcher, churner_spec: VmSpec, scratch: Path
) -> None:
    await launch(churner_spec, "owner")

    assert await watch_for_holes(churner_spec.mem_path, scratch / "owner.log", WATCH_S)


async def fork_child_and_free(
    launch: Launcher, spec: VmSpec, scratch: Path
) -> tuple[str, bool]:
    """Capture the churner before it frees, restore a share=off child that frees; returns the
    frozen RAM file's digest at capture and whether the child punched holes into it."""
    source = await launch(spec, "source")
    await wait_for_tick(scratch / "source.log", at_least=3, time_limit=BOOT_LIMIT_S)
    await source.capture(scratch / "state")
    await source.shutdown()
    frozen = sha256(spec.mem_path)

    child = await launch(dataclasses.replace(spec, mem_shared=False), "child", incoming=True)
    await child.restore(scratch / "state")
    punched = await watch_for_holes(spec.mem_path, scratch / "child.log", WATCH_S)
    await child.shutdown()
    return frozen, punched


async def test_child_without_reporting_leaves_frozen_ram_intact(
    launch: Launcher, churner_spec: VmSpec, scratch: Path
) -> None:
    spec = dataclasses.replace(churner_spec, free_page_reporting=False)

    frozen, punched = await fork_child_and_free(launch, spec, scratch)

    assert not punched
    assert sha256(spec.mem_path) == frozen


async def test_child_with_reporting_leaves_frozen_ram_intact(
    launch: Launcher, churner_spec: VmSpec, scratch: Path
) -> None:
    frozen, punched = await fork_child_and_free(launch, churner_spec, scratch)

    assert not punched
    assert sha256(churner_spec.mem_path) == frozen


def anonymous_kib(pid: int) -> int:
    """Private memory of the process not backed by a file: a share=off child's dirtied pages."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1])
    raise AssertionError(f"no Anonymous in /proc/{pid}/smaps_rollup")


async def test_child_returns_the_memory_it_frees_to_the_host(
    launch: Launcher, ticker_spec: VmSpec, guest_kernel: GuestKernel, scratch: Path
) -> None:
    initrd = write_memory_churner_initramfs(scratch / "late.cpio", guest_kernel,
                                            free_at_tick=60, fill_at_tick=10)
    spec = dataclasses.replace(ticker_spec, initrd=initrd, memory_mib=256)
    source = await launch(spec, "source")
    await wait_for_tick(scratch / "source.log", at_least=3, time_limit=BOOT_LIMIT_S)
    await source.capture(scratch / "state")  # before the fill
    await source.shutdown()
    frozen = sha256(spec.mem_path)

    child = await launch(dataclasses.replace(spec, mem_shared=False), "child", incoming=True)
    await child.restore(scratch / "state")
    console = scratch / "child.log"
    await until_logged(console, "FILLED")
    filled = anonymous_kib(child.pid)
    await until_logged(console, "FREED")
    returned = False
    for _ in range(int(WATCH_S / 0.2)):
        if anonymous_kib(child.pid) < filled - 40 * 1024:  # of the 64 MiB it dirtied
            returned = True
            break
        await asyncio.sleep(0.2)
    final = anonymous_kib(child.pid)
    await child.shutdown()

    assert returned, f"private memory {filled} KiB after the fill, {final} KiB after the free"
    assert sha256(spec.mem_path) == frozen


async def until_logged(console_log: Path, marker: str) -> None:
    deadline = asyncio.get_running_loop().time() + BOOT_LIMIT_S
    while marker not in (console_log.read_text() if console_log.exists() else ""):
        assert asyncio.get_running_loop().time() < deadline, f"the guest never printed {marker}"
        await asyncio.sleep(0.1)
