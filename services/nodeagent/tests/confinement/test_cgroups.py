"""Detection of the host's cgroup layout and a node's VM cgroups, over temporary directories laid
out as cgroupfs is (v2, v1 hybrid, nothing usable): what is written where, what is swept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aenv_nodeagent.confinement import cgroupfs
from aenv_nodeagent.confinement.cgroups import ConfinementUnavailable, VmCgroups, detect
from aenv_nodeagent.confinement.choice import choose, node_key
from aenv_nodeagent.confinement.limits import LimitSettings, VmShape

MIB = 1 << 20
SETTINGS = LimitSettings(memory_overhead_mib=64, pids_max=128)
# As on these hosts: v1 hierarchies per controller, and systemd's controller-less v2 `unified`.
HYBRID = """\
31 23 0:28 / {root} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2 = "29 23 0:26 /machine/ctr {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID_OWN = {"cpu": "/", "cpuacct": "/", "memory": "/agents/a1", "pids": "/", "": "/"}


def _hybrid(root: Path) -> str:
    for name in ("cpu,cpuacct", "memory/agents/a1", "pids", "unified"):
        (root / name).mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("")
    return HYBRID.format(root=root)


def _v2(root: Path, controllers: str = "cpuset cpu io memory hugetlb pids") -> str:
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    return V2.format(root=root)


def test_a_hybrid_host_uses_its_v1_hierarchies(tmp_path: Path) -> None:
    hierarchies = detect(_hybrid(tmp_path))
    assert {(h.version, h.mount.path.name, tuple(sorted(h.controllers))) for h in hierarchies} == {
        (1, "cpu,cpuacct", ("cpu",)), (1, "memory", ("memory",)), (1, "pids", ("pids",))}


def test_v2_is_preferred_when_it_has_the_controllers(tmp_path: Path) -> None:
    mountinfo = _hybrid(tmp_path) + V2.format(root=tmp_path / "v2")
    _v2(tmp_path / "v2")
    (hierarchy,) = detect(mountinfo)
    assert hierarchy.version == 2
    assert hierarchy.controllers == {"cpu", "io", "memory", "pids"}


def test_a_host_without_the_controllers_says_what_it_has(tmp_path: Path) -> None:
    mountinfo = _v2(tmp_path, "cpu io") + (
        f"40 31 0:37 / {tmp_path}/mem rw - cgroup cgroup rw,memory\n")
    with pytest.raises(ConfinementUnavailable, match=r"v2 at .* has \[cpu io\]; v1 mounts "
                                                     r"\[memory\]"):
        detect(mountinfo)


def test_proc_cgroup_names_each_controllers_cgroup() -> None:
    text = "12:cpu,cpuacct:/a\n4:memory:/process_api/x\n0::/init.scope\n"
    assert cgroupfs.parse_proc_cgroup(text) == {
        "cpu": "/a", "cpuacct": "/a", "memory": "/process_api/x", "": "/init.scope"}


def test_v1_vm_cgroups_sit_in_the_agents_own_cgroups(tmp_path: Path) -> None:
    cgroups = VmCgroups.open(detect(_hybrid(tmp_path)), "k1", SETTINGS, HYBRID_OWN)
    cgroup = cgroups.create(VmShape(2, 512))
    by_name = {d.parent.parent.name if d.parent.parent.name != "a1" else "memory": d
               for d in cgroup.dirs}
    assert by_name["memory"] == tmp_path / "memory/agents/a1/aenv-k1" / cgroup.name
    assert (by_name["memory"] / "memory.limit_in_bytes").read_text() == str((512 + 64) * MIB)
    assert (by_name["cpu,cpuacct"] / "cpu.cfs_quota_us").read_text() == "200000"
    assert (by_name["cpu,cpuacct"] / "cpu.cfs_period_us").read_text() == "100000"
    assert (by_name["pids"] / "pids.max").read_text() == "128"
    assert sorted(p.parent.name for p in cgroup.procs_files) == [cgroup.name] * 3
    assert cgroups.describe() == "cgroup v1 (cpu, memory, pids)"


def test_v2_vm_cgroups_get_their_controllers_from_the_root_down(tmp_path: Path) -> None:
    cgroups = VmCgroups.open(detect(_v2(tmp_path)), "k2", SETTINGS, {"": "/machine/ctr/agent"})
    slice_dir = tmp_path / "aenv" / "aenv-k2"
    assert cgroups.slices == (slice_dir,)
    for directory in (tmp_path, tmp_path / "aenv", slice_dir):
        assert (directory / "cgroup.subtree_control").read_text() == "+cpu +io +memory +pids"
    (directory,) = cgroups.create(VmShape(1, 256, freezes=True)).dirs
    assert directory.parent == slice_dir
    assert {f.name: f.read_text() for f in directory.iterdir()} == {
        "cpu.max": "100000 100000", "io.weight": "default 100",
        "memory.max": str((2 * 256 + 64) * MIB), "pids.max": "128"}


def _emptied(directory: Path) -> None:
    """What the kernel's cgroupfs needs no help with: its interface files do not block rmdir."""
    for file in directory.iterdir():
        file.unlink()


def test_a_vm_cgroup_goes_with_its_vm_and_a_busy_one_is_swept_later(tmp_path: Path) -> None:
    cgroups = VmCgroups.open(detect(_hybrid(tmp_path)), "k3", SETTINGS, HYBRID_OWN)
    ended, busy = cgroups.create(VmShape(1, 256)), cgroups.create(VmShape(1, 256))
    for directory in ended.dirs:
        _emptied(directory)
    assert cgroups.remove(ended)
    assert not any(d.exists() for d in ended.dirs)
    # A frozen copy still in it (here: its files, which a plain rmdir refuses as busy).
    assert not cgroups.remove(busy)
    assert all(d.exists() for d in busy.dirs)
    for directory in busy.dirs:
        _emptied(directory)
    assert cgroups.sweep() == [busy.name] * 3
    # The slice's CPU share is at one busy task per host CPU (cpu is in one hierarchy).
    shares = [(s / "cpu.shares").read_text() for s in cgroups.slices if (s / "cpu.shares").exists()]
    assert shares == [str(1024 * (os.cpu_count() or 1))]
    for slice_dir in cgroups.slices:
        _emptied(slice_dir)
    cgroups.close()
    assert not any(s.exists() for s in cgroups.slices)


def test_a_restarted_agent_sweeps_the_empty_leftovers_and_keeps_live_ones(
        tmp_path: Path) -> None:
    mountinfo = _hybrid(tmp_path)
    first = VmCgroups.open(detect(mountinfo), "k4", SETTINGS, HYBRID_OWN)
    left, running = first.create(VmShape(1, 256)), first.create(VmShape(1, 256))
    for directory in left.dirs:
        _emptied(directory)
    second = VmCgroups.open(detect(mountinfo), "k4", SETTINGS, HYBRID_OWN)
    assert not any(d.exists() for d in left.dirs)
    assert all(d.exists() for d in running.dirs)
    assert second.slices == first.slices


def test_a_slice_that_cannot_be_made_is_unavailable(tmp_path: Path) -> None:
    mountinfo = _hybrid(tmp_path)
    (tmp_path / "pids").rmdir()
    (tmp_path / "pids").write_text("")  # not a directory
    with pytest.raises(ConfinementUnavailable, match="cannot make the node's cgroup"):
        VmCgroups.open(detect(mountinfo), "k5", SETTINGS, HYBRID_OWN)


def test_off_and_auto_say_unconfined_and_required_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nothing() -> tuple[()]:
        raise ConfinementUnavailable("no cgroup hierarchy offers cpu, memory, pids")

    monkeypatch.setattr("aenv_nodeagent.confinement.choice.detect", lambda _: nothing())
    assert choose("off", tmp_path, SETTINGS).status == "unconfined: vmm_cgroups=off"
    auto = choose("auto", tmp_path, SETTINGS)
    assert auto.cgroups is None
    assert auto.status == "unconfined: no cgroup hierarchy offers cpu, memory, pids"
    with pytest.raises(ConfinementUnavailable, match="vmm_cgroups=required, but"):
        choose("required", tmp_path, SETTINGS)


def test_node_keys_tell_state_directories_apart(tmp_path: Path) -> None:
    assert node_key(tmp_path / "a") != node_key(tmp_path / "b")
    assert node_key(tmp_path / "a") == node_key(tmp_path / "x" / ".." / "a")


def test_a_slice_removed_under_the_node_is_made_again(tmp_path: Path) -> None:
    cgroups = VmCgroups.open(detect(_hybrid(tmp_path)), "k6", SETTINGS, HYBRID_OWN)
    cgroups.close()  # as a cleanup run beside the node would
    cgroup = cgroups.create(VmShape(1, 256))
    assert all(d.is_dir() for d in cgroup.dirs)
