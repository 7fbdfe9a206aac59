"""QEMU's exec step on real processes: what runs through it is in its cgroup, without core dumps,
with bounded descriptors and no_new_privs, from its first instruction; a step that fails runs
nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.confinement import (
    ConfinementUnavailable,
    LimitSettings,
    VmCgroups,
    VmShape,
    choose,
)
from aenv_nodeagent.vmm import jail

_REPORT = "cat /proc/self/cgroup; ulimit -c; ulimit -n; grep NoNewPrivs /proc/self/status"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.fixture
def cgroups(tmp_path: Path) -> Iterator[VmCgroups]:
    try:
        confinement = choose("required", tmp_path, LimitSettings())
    except ConfinementUnavailable as err:
        pytest.skip(err.message)
    assert confinement.cgroups is not None
    yield confinement.cgroups
    confinement.cgroups.close()
    assert not any(s.exists() for s in confinement.cgroups.slices)


def test_rlimits_and_no_new_privs_hold_without_a_cgroup() -> None:
    done = _run(jail.wrapped(["sh", "-c", _REPORT], nofile=256))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-3:] == ["0", "256", "NoNewPrivs:\t1"]


def test_the_command_runs_in_its_cgroup(cgroups: VmCgroups) -> None:
    cgroup = cgroups.create(VmShape(1, 64))
    done = _run(jail.wrapped(["sh", "-c", _REPORT], cgroup_procs=cgroup.procs_files))
    assert done.returncode == 0, done.stderr
    placed = [line for line in done.stdout.splitlines() if line.endswith("/" + cgroup.name)]
    assert len(placed) == len(cgroup.dirs)
    assert cgroups.remove(cgroup)  # the process is gone: so is its cgroup


def test_a_cgroup_it_cannot_join_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = _run(jail.wrapped(["touch", str(marker)],
                             cgroup_procs=[tmp_path / "gone" / "cgroup.procs"]))
    assert done.returncode == 125
    assert "aenv jail:" in done.stderr
    assert not marker.exists()


def test_the_hole_punch_filter_is_installed_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "ram"
    target.write_bytes(b"\xaa" * (1 << 20))
    punch = ["fallocate", "--punch-hole", "--offset", "0", "--length", str(1 << 20), str(target)]
    assert _run(jail.wrapped(punch, hole_punch_filter=True)).returncode == 0
    assert target.read_bytes() == b"\xaa" * (1 << 20)
    assert _run(jail.wrapped(punch)).returncode == 0
    assert target.stat().st_blocks == 0
