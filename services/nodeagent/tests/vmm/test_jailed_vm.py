"""QEMU jailed on this host: it runs as a uid of its own from the node's range, with no
capability, no_new_privs and seccomp filters (QEMU's, and the preload's that kills an exec or
fork), in a root holding the system and its own files
only; pause, resume, captures, saved device state and adoption work as unjailed; its uid is
free again once it is gone."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.no_disassembler import disassembler_needs
from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.artifacts.proc import require_tool
from aenv_nodeagent.vmm import QemuVm, VmJail, VmSpec
from aenv_nodeagent.vmm.argv import QEMU_BINARY, SOCKET_DIR
from aenv_nodeagent.vmm.preload import NO_DISASSEMBLER_NAME, preloaded
from aenv_nodeagent.vmm.uids import UidRange, VmUids

pytestmark = pytest.mark.vm

UIDS = UidRange(1_100_006_000, 8)  # in no range a node agent or other tests hand out


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _tree(root: Path) -> set[str]:
    """Every path under `root` but the system's (read-only binds of /usr, devices, /proc)."""
    found: set[str] = set()
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in ("usr", "proc", "dev")]
        found.update(str(Path(directory, n).relative_to(root)) for n in names)
    return found


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(ensure_preload_library(tmp_path_factory.mktemp("cache"))).path


async def test_a_jailed_qemu_is_unprivileged_and_sees_only_its_files(
    ticker_spec: VmSpec, scratch: Path, library: Path
) -> None:
    uids = VmUids(UIDS)
    # share=on, as a template's capture VM: the preload brings only its exec filter.
    ticker_spec = dataclasses.replace(ticker_spec, preload_library=library)
    vm = await QemuVm.launch(ticker_spec, scratch / "vm", incoming=False,
                             console_log=scratch / "console.log", jail=VmJail(uids=uids))
    try:
        assert vm.uid in UIDS
        status = _status(vm.pid)
        assert status["Uid"].split() == [str(vm.uid)] * 4
        assert status["Gid"].split() == [str(vm.uid)] * 4
        assert status["Groups"].strip() == ""
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[cap], 16) == 0, cap
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"
        assert status["Seccomp_filters"] == "2"  # QEMU's -sandbox, the preload's exec filter
        assert not vm.logs_writes and not vm.freezes
        root = Path(f"/proc/{vm.pid}/root")
        assert set(os.listdir(root)) <= {"bin", "dev", "lib", "lib64", "proc", "sbin", "tmp",
                                         "usr"}
        rel = str(scratch).lstrip("/")
        assert _tree(root) == {
            *(f"{rel}/vm/{name}" for name in ("qmp.sock", "qemu.pid", "qemu.stderr")),
            f"{rel}/console.log",
            str(ticker_spec.boot_kernel).lstrip("/"), str(ticker_spec.initrd).lstrip("/"),
            *(str(path).lstrip("/") for path in preloaded(library)),
        }
        assert (root / "dev").is_dir() and str(ticker_spec.mem_path).startswith("/dev/shm/")
        await vm.pause()
        await vm.resume()
        assert await vm.status() == "running"
        await _without_the_disassembler(vm, library)
        await vm.capture(scratch / "state")
        await vm.save_device_state(scratch / "devices")
        assert (scratch / "devices").stat().st_uid == 0 and (scratch / "devices").stat().st_size
    finally:
        await vm.shutdown()
    assert uids.acquire() != vm.uid  # the freed uid comes last


async def _without_the_disassembler(vm: QemuVm, library: Path) -> None:
    """A QEMU that links a disassembler library maps the stand-in instead (vmm/preload.py),
    and runs on when asked to disassemble."""
    if await disassembler_needs(require_tool(QEMU_BINARY)) is None:
        return
    maps = Path(f"/proc/{vm.pid}/maps").read_text()
    assert str(library.with_name(NO_DISASSEMBLER_NAME)) in maps
    assert "libcapstone" not in maps
    await vm.execute("human-monitor-command", {"command-line": "x/4i 0"})
    assert await vm.status() == "running"


async def test_an_adopted_jailed_vm_keeps_its_uid_held(ticker_spec: VmSpec, scratch: Path) -> None:
    first = VmUids(UIDS)
    vm = await QemuVm.launch(ticker_spec, scratch / "vm", incoming=False,
                             jail=VmJail(uids=first))
    try:
        await vm.release()  # the agent dies
        restarted = VmUids(UIDS)
        adopted = await QemuVm.attach(scratch / "vm", jail=VmJail(uids=restarted))
        assert adopted.uid == vm.uid
        assert await adopted.status() == "running"
        others = {restarted.acquire() for _ in range(UIDS.count - 1)}
        assert vm.uid not in others
        await adopted.shutdown()
    finally:
        await vm.shutdown()


async def test_a_jailed_qemu_in_a_deep_directory_binds_its_qmp_socket_in_its_own(
    ticker_spec: VmSpec, scratch: Path
) -> None:
    """A work directory too deep for a socket address puts the socket under /run/aenv/qmp, in
    a directory of the VM's own: the jailed uid may create nothing else there."""
    deep = scratch / ("d" * 110) / "vm"
    vm = await QemuVm.launch(ticker_spec, deep, incoming=False, jail=VmJail(uids=VmUids(UIDS)))
    socket_dir = vm.files.qmp_socket.parent
    try:
        assert socket_dir.parent == SOCKET_DIR and socket_dir.stat().st_uid == vm.uid
        assert vm.files.qmp_socket.is_socket()
        assert await vm.status() == "running"
    finally:
        await vm.shutdown()
    assert not socket_dir.exists()
