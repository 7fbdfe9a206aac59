"""Fixtures for VMM tests: guest payload, scratch dirs, and a launcher that always reaps QEMU."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from aenv_nodeagent.vmm import DiskSpec, QemuVm, VmSpec, detect_accelerator

from .guest import GuestKernel, cached_kernel, write_ticker_initramfs
from .test_stream import page


@pytest.fixture(scope="session")
def guest_kernel() -> GuestKernel:
    return cached_kernel()


@pytest.fixture(scope="session")
def vmlinux(guest_kernel: GuestKernel) -> Path:
    return guest_kernel.vmlinux


@pytest.fixture(scope="session")
def ticker_initramfs() -> Iterator[Path]:
    scratch = Path(tempfile.mkdtemp(prefix="aenv-vmm-initrd-"))
    try:
        yield write_ticker_initramfs(scratch / "ticker.cpio")
    finally:
        shutil.rmtree(scratch)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A short-pathed scratch dir (QMP socket paths must fit 107 bytes), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="aenv-vmm-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """Where guest RAM files live, as in production (/dev/shm); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="aenv-vmm-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture
def ticker_spec(vmlinux: Path, ticker_initramfs: Path, shm_dir: Path) -> VmSpec:
    return VmSpec(
        vcpus=1,
        memory_mib=128,
        kernel=vmlinux,
        initrd=ticker_initramfs,
        cmdline="console=ttyS0 quiet panic=-1",
        disks=(),
        net=None,
        mem_path=shm_dir / "guest.mem",
        mem_shared=True,
        accel=detect_accelerator(pvm_guest_kernel=None),
        tcg_tb_mib=32,
    )


def with_disk(spec: VmSpec, disk: DiskSpec) -> VmSpec:
    return dataclasses.replace(spec, disks=(disk,))


class Launcher(Protocol):
    async def __call__(
        self, spec: VmSpec, name: str, *, incoming: bool = False,
        argv_prefix: tuple[str, ...] = (),
    ) -> QemuVm: ...


@pytest.fixture
async def launch(scratch: Path) -> AsyncIterator[Launcher]:
    """Launches QEMUs under `scratch/<name>` (console in `scratch/<name>.log`); every one is
    shut down and verified gone when the test ends, pass or fail."""
    started: list[QemuVm] = []

    async def _launch(
        spec: VmSpec, name: str, *, incoming: bool = False, argv_prefix: tuple[str, ...] = (),
    ) -> QemuVm:
        vm = await QemuVm.launch(spec, scratch / name, incoming=incoming,
                                 argv_prefix=argv_prefix, console_log=scratch / f"{name}.log")
        started.append(vm)
        return vm

    try:
        yield _launch
    finally:
        for vm in started:
            await vm.shutdown()
        for vm in started:
            assert not process_exists(vm.pid), f"QEMU {vm.pid} survived shutdown"


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (to prove a failed launch left no QEMU)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


# Maps argv[1] copy-on-write, writes pages 1 and 5, reads page 2, then waits to be killed.
_DIRTIER = """
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    ram = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE)
ram[1 * 4096:2 * 4096] = b"\\xa1" * 4096
ram[5 * 4096:6 * 4096] = b"\\xa5" * 4096
assert ram[2 * 4096] == 2
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    """A RAM file of 8 pages, page i filled with byte i."""
    path = tmp_path / "memory"
    path.write_bytes(b"".join(page(i) for i in range(8)))
    return path


@pytest.fixture
def dirtier(memory: Path) -> Iterator[subprocess.Popen[str]]:
    """A process mapping `memory` copy-on-write that wrote pages 1 and 5 and read page 2."""
    proc = subprocess.Popen([sys.executable, "-c", _DIRTIER, str(memory)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.kill()
        proc.wait()
