"""The node's slice on this host's real cgroups (v2, or v1 on hybrid hosts; root): its CPU
weight, as the kernel reads it back, follows the VMs it holds — made, removed, adopted by a
restarted agent — and stays within the cgroupfs's bounds. No VM: processes stand in for them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.confinement import LimitSettings, VmCgroups
from aenv_nodeagent.confinement.limits import VmShape

from .host import host_cgroups, open_host_cgroups

SETTINGS = LimitSettings(memory_overhead_mib=64, pids_max=64)
HOST_CPUS = os.cpu_count() or 1


@pytest.fixture
def cgroups(tmp_path: Path) -> Iterator[VmCgroups]:
    with host_cgroups(tmp_path, SETTINGS) as cgroups:
        yield cgroups


def _tasks(cgroups: VmCgroups) -> float:
    """The slice's CPU weight as the kernel has it, in tasks' shares."""
    for hierarchy, slice_dir in zip(cgroups.hierarchies, cgroups.slices, strict=True):
        if "cpu" in hierarchy.controllers:
            if hierarchy.version == 2:
                return int((slice_dir / "cpu.weight").read_text()) / 100
            return int((slice_dir / "cpu.shares").read_text()) / 1024
    raise AssertionError("no cpu hierarchy")


def test_the_slice_weighs_one_task_per_vm_and_an_adopting_agent_counts_its_vms(
        cgroups: VmCgroups, tmp_path: Path) -> None:
    assert _tasks(cgroups) == HOST_CPUS
    count = HOST_CPUS + 2
    made = [cgroups.create(VmShape(1, 128)) for _ in range(count)]
    assert _tasks(cgroups) == count
    # A VMM per cgroup (a sleep, joined as the jail step joins: its pid in each procs file).
    sleeps = [subprocess.Popen(["sleep", "120"]) for _ in made]
    try:
        for sleep, cgroup in zip(sleeps, made, strict=True):
            for procs in cgroup.procs_files:
                procs.write_text(str(sleep.pid))
        # The agent again: its slice, the VMs still in it.
        restarted = open_host_cgroups(tmp_path, SETTINGS)
        assert _tasks(restarted) == HOST_CPUS
        adopted = [restarted.of_pid(sleep.pid) for sleep in sleeps]
        assert [c.name if c else None for c in adopted] == [c.name for c in made]
        assert _tasks(restarted) == count
        sleeps[0].kill()
        sleeps[0].wait()
        assert restarted.remove(made[0])
        assert _tasks(restarted) == count - 1
        for sleep in sleeps:
            sleep.kill()
            sleep.wait()
        assert all([restarted.remove(cgroup) for cgroup in made[1:]])
        assert _tasks(restarted) == HOST_CPUS
    finally:
        for sleep in sleeps:
            sleep.kill()
            sleep.wait()
        for cgroup in made:
            cgroups.remove(cgroup)


def test_a_crowded_slice_weighs_the_cgroupfs_maximum(cgroups: VmCgroups) -> None:
    made = [cgroups.create(VmShape(1, 128)) for _ in range(260)]
    cap = 10_000 / 100 if cgroups.hierarchies[0].version == 2 else 262_144 / 1024
    assert _tasks(cgroups) == cap
    for cgroup in made:
        assert cgroups.remove(cgroup)
    assert _tasks(cgroups) == HOST_CPUS
