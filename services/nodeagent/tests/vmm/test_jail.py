"""QEMU's exec step on real processes: what runs through it is in its cgroup, without core dumps,
with bounded descriptors and no_new_privs, from its first instruction; a step that fails runs
nothing."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.confinement import (
    ConfinementUnavailable,
    LimitSettings,
    VmCgroups,
    VmShape,
    choose,
)
from aenv_nodeagent.vmm import jail
from aenv_nodeagent.vmm.preload import LIBRARY_NAME

_REPORT = "cat /proc/self/cgroup; ulimit -c; ulimit -n; grep NoNewPrivs /proc/self/status"


def _run(argv: list[str], env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=None if env is None else {**os.environ, **env})


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


def test_huge_pages_are_off_for_the_command_only_when_asked() -> None:
    report = ["grep", "THP_enabled", "/proc/self/status"]
    assert _run(jail.wrapped(report, huge_pages=False)).stdout.split() == ["THP_enabled:", "0"]
    assert _run(jail.wrapped(report)).stdout.split() == ["THP_enabled:", "1"]


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


def _jailed(
    tmp_path: Path, argv: list[str], env: dict[str, str] | None = None, **binds: list[Path]
) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return _run(jail.wrapped(argv, jailed=jail.jail_options(
        JAIL_UID, root, binds.get("writable", []), binds.get("readonly", []))), env)


JAIL_UID = 1_100_004_000  # in no range a node agent or the lifecycle tests hand out


def test_a_jailed_command_runs_as_its_uid_without_any_capability(tmp_path: Path) -> None:
    done = _jailed(tmp_path, ["cat", "/proc/self/status"])
    assert done.returncode == 0, done.stderr
    status = dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)
    assert status["Uid"].split() == [str(JAIL_UID)] * 4
    assert status["Gid"].split() == [str(JAIL_UID)] * 4
    assert status["Groups"].strip() == ""
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[cap], 16) == 0, cap
    assert status["NoNewPrivs"] == "1"


def test_a_jailed_command_sees_only_the_system_and_its_binds(tmp_path: Path) -> None:
    own, shared, hidden = tmp_path / "own", tmp_path / "shared", tmp_path / "hidden"
    for directory in (own, shared, hidden):
        directory.mkdir()
    os.chown(own, JAIL_UID, JAIL_UID)
    (shared / "template").write_text("read me")
    (hidden / "secret").write_text("not for the jail")
    script = (f"ls /; echo --; ls {tmp_path}; echo --; cat {shared}/template; echo;"
              "ls /proc | grep -c '^[0-9]'; echo --;"
              f"echo x > {own}/made && echo own-written; echo x > {shared}/template || echo ro;"
              f"cat {hidden}/secret || echo hidden")
    done = _jailed(tmp_path, ["sh", "-c", script], writable=[own], readonly=[shared])
    assert done.returncode == 0, done.stderr
    root, listed, read, wrote = (part.split() for part in done.stdout.split("--\n"))
    assert set(root) <= {"bin", "dev", "lib", "lib64", "proc", "sbin", "tmp", "usr"}
    assert listed == ["own", "shared"]
    assert read == ["read", "me", "3"]  # /proc holds its uid's processes only: sh, ls, grep
    assert wrote == ["own-written", "ro", "hidden"]
    assert (own / "made").stat().st_uid == JAIL_UID
    assert (shared / "template").read_text() == "read me"


def test_a_jail_that_cannot_be_made_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = _jailed(tmp_path, ["touch", str(marker)], readonly=[tmp_path / "missing"])
    assert done.returncode == 125
    assert "aenv jail:" in done.stderr
    assert not marker.exists()


def test_a_jailed_command_under_the_preload_may_not_fork_or_exec(tmp_path: Path) -> None:
    """The jail asks the preload library for its exec filter (execfilter.c): the shell is killed
    by its fork of /bin/true. Unjailed, the same library lets it run."""
    shared = tmp_path / "lib"
    shared.mkdir()
    library = shared / LIBRARY_NAME
    shutil.copy(asyncio.run(ensure_preload_library(tmp_path / "cache")).path, library)
    library.chmod(0o755)
    script = ["sh", "-c", "echo before; /bin/true; echo after"]
    done = _jailed(tmp_path, script, {"LD_PRELOAD": str(library)}, readonly=[shared])
    assert (done.returncode, done.stdout) == (-signal.SIGSYS, "before\n"), done.stderr
    unjailed = _run(jail.wrapped(script), {"LD_PRELOAD": str(library)})
    assert (unjailed.returncode, unjailed.stdout) == (0, "before\nafter\n"), unjailed.stderr
