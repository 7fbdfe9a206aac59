"""QEMU confined by the node's jail on this host's real cgroups: it runs in a cgroup of its own
with its VM's limits, no core dumps, bounded descriptors and no_new_privs from its first
instruction; the cgroup goes with the VM (shutdown, failed launch), is found again by an agent
that adopts the VM, and its memory limit bites."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_common.errors import AenvError
from aenv_nodeagent.confinement import (
    ConfinementUnavailable,
    LimitSettings,
    VmCgroup,
    VmCgroups,
    choose,
)
from aenv_nodeagent.confinement.cgroupfs import children, proc_cgroup
from aenv_nodeagent.vmm import QemuVm, VmJail, VmSpec
from aenv_nodeagent.vmm.accel import Accelerator
from aenv_nodeagent.vmm.confined import Confined

from .conftest import process_exists

pytestmark = pytest.mark.vm

MIB = 1 << 20
SETTINGS = LimitSettings(memory_overhead_mib=192, pids_max=256)


def _cgroups(state_dir: Path) -> VmCgroups:
    try:
        confinement = choose("required", state_dir, SETTINGS)
    except ConfinementUnavailable as err:
        pytest.skip(err.message)
    assert confinement.cgroups is not None
    return confinement.cgroups


@pytest.fixture
def cgroups(scratch: Path) -> Iterator[VmCgroups]:
    """The node's cgroups over `scratch` as its state dir; none is left when the test ends."""
    cgroups = _cgroups(scratch)
    try:
        yield cgroups
    finally:
        cgroups.close()
        assert not any(s.exists() for s in cgroups.slices)


def _limits(cgroup: VmCgroup) -> dict[str, str]:
    wanted = ("cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "memory.max",
              "memory.limit_in_bytes", "pids.max")
    return {name: (d / name).read_text().strip() for d in cgroup.dirs for name in wanted
            if (d / name).exists()}


def _proc_limit(pid: int, name: str) -> list[str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return line[len(name):].split()[:2]
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


async def test_qemu_runs_in_its_own_cgroup_with_its_vms_limits(
    ticker_spec: VmSpec, scratch: Path, cgroups: VmCgroups
) -> None:
    spec = dataclasses.replace(ticker_spec, vcpus=2)
    vm = await QemuVm.launch(spec, scratch / "vm", incoming=False, jail=VmJail(cgroups))
    try:
        cgroup = vm.cgroup
        assert cgroup is not None
        for directory in cgroup.dirs:  # in every hierarchy, as /proc says too
            assert vm.pid in [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        placed = proc_cgroup(vm.pid)
        assert [path for path in placed.values() if path.endswith("/" + cgroup.name)]
        memory = str((128 + 32 + 192) * MIB)  # guest RAM + TCG's translation cache + overhead
        assert _limits(cgroup) in (
            {"cpu.cfs_quota_us": "200000", "cpu.cfs_period_us": "100000",
             "memory.limit_in_bytes": memory, "pids.max": "256"},
            {"cpu.max": "200000 100000", "memory.max": memory, "pids.max": "256"})
        assert _proc_limit(vm.pid, "Max core file size") == ["0", "0"]
        assert _proc_limit(vm.pid, "Max open files") == ["4096", "4096"]
        status = Path(f"/proc/{vm.pid}/status").read_text()
        assert "NoNewPrivs:\t1" in status
        # Under TCG without huge pages (its translation cache would round up to 2 MiB steps).
        tcg = spec.accel.accel is Accelerator.TCG
        assert f"THP_enabled:\t{0 if tcg else 1}" in status
        assert await vm.status() == "running"
    finally:
        await vm.shutdown()
    assert not any(d.exists() for d in cgroup.dirs)


async def test_a_failed_launch_leaves_no_cgroup(
    ticker_spec: VmSpec, scratch: Path, cgroups: VmCgroups
) -> None:
    broken = dataclasses.replace(ticker_spec, kernel=scratch / "no-such-kernel")
    with pytest.raises(AenvError):
        await QemuVm.launch(broken, scratch / "vm", incoming=False, jail=VmJail(cgroups))
    assert [children(s) for s in cgroups.slices] == [[] for _ in cgroups.slices]


async def test_an_adopted_vm_keeps_its_cgroup_and_it_goes_with_the_vm(
    ticker_spec: VmSpec, scratch: Path, cgroups: VmCgroups
) -> None:
    vm = await QemuVm.launch(ticker_spec, scratch / "vm", incoming=False, jail=VmJail(cgroups))
    try:
        cgroup = vm.cgroup
        assert cgroup is not None
        await vm.release()  # the agent dies
        restarted = _cgroups(scratch)  # the next run: its start sweeps leftovers, not this one
        assert all(d.exists() for d in cgroup.dirs)
        adopted = await QemuVm.attach(scratch / "vm", jail=VmJail(restarted))
        assert adopted.cgroup == cgroup
        await adopted.shutdown()
        # QEMU is this test's own child: dead, it lingers until asyncio's watcher reaps it
        # (a real adopter's dead predecessor left it to init, which reaps it at once).
        await _gone(vm.pid)
        assert not any(d.exists() for d in cgroup.dirs)
    finally:
        await vm.shutdown()


async def _gone(pid: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while process_exists(pid):
        assert time.monotonic() < deadline, f"process {pid} still there after {within_s} s"
        await asyncio.sleep(0.05)


class _StarvedJail(VmJail):
    """Gives QEMU a memory limit far below what it needs to start."""

    def enter(self, spec: VmSpec, workdir: Path, console_log: Path | None) -> Confined:
        confined = super().enter(spec, workdir, console_log)
        assert confined.cgroup is not None
        for directory in confined.cgroup.dirs:
            for name in ("memory.max", "memory.limit_in_bytes"):
                if (directory / name).exists():
                    (directory / name).write_text(str(16 * MIB))
        return confined


async def test_the_memory_limit_bites(
    ticker_spec: VmSpec, scratch: Path, cgroups: VmCgroups
) -> None:
    with pytest.raises(AenvError, match=r"exit status -9"):  # the cgroup's OOM killer
        await QemuVm.launch(ticker_spec, scratch / "vm", incoming=False,
                            jail=_StarvedJail(cgroups))
    assert [children(s) for s in cgroups.slices] == [[] for _ in cgroups.slices]
