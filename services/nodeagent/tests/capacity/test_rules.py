"""What a node offers from its host and settings, and when it is under memory pressure (pure);
the host's files parsed."""

from __future__ import annotations

from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.capacity.host import (
    Host,
    memory_limit_of,
    parse_meminfo,
    parse_psi_some_avg10,
)
from aenv_nodeagent.capacity.rules import CapacityPolicy, offer, pressure
from aenv_nodeagent.confinement.cgroupfs import parse_mountinfo

R = cluster_pb2.Resources
HOST = Host(cpus=2, memory_mib=24_104, disk_free_mib=77_000)


def policy(**overrides: object) -> CapacityPolicy:
    fields: dict[str, object] = {
        "vcpus": None,
        "memory_mib": None,
        "disk_mib": None,
        "cpu_overcommit": 4.0,
        "memory_overcommit": 8.0,
        "disk_overcommit": 4.0,
        "memory_reserved_mib": 2048,
        "memory_budget_mib": None,
        "available_min_mib": 1024,
        "psi_some_avg10_max": 20.0,
    }
    return CapacityPolicy(**{**fields, **overrides})  # type: ignore[arg-type]


def test_the_offer_is_the_host_times_the_ratios() -> None:
    offered = offer(HOST, policy())
    assert offered.memory_budget_mib == 24_104 - 2048
    assert offered.capacity == R(vcpus=8, memory_mib=(24_104 - 2048) * 8, disk_mib=308_000)


def test_static_values_override_the_host() -> None:
    offered = offer(
        HOST, policy(vcpus=64, memory_mib=16_384, disk_mib=1000, memory_budget_mib=2048)
    )
    assert offered.capacity == R(vcpus=64, memory_mib=16_384, disk_mib=1000)
    assert offered.memory_budget_mib == 2048
    # A budget alone sets the nominal memory through the ratio.
    assert offer(HOST, policy(memory_budget_mib=2048)).capacity.memory_mib == 16_384


def test_a_reserve_larger_than_the_host_leaves_no_budget() -> None:
    assert offer(Host(2, 1024, 10), policy()).memory_budget_mib == 0


def test_pressure_is_a_low_memory_available_or_a_high_psi() -> None:
    assert pressure(5000, 0.0, policy()) == ""
    assert pressure(5000, None, policy()) == ""  # a host without PSI: MemAvailable alone
    assert pressure(900, 0.0, policy()) == "MemAvailable 900 MiB < 1024 MiB"
    assert pressure(5000, 35.5, policy()) == "PSI memory some avg10 35.5% > 20.0%"


def test_meminfo_and_psi_parse() -> None:
    meminfo = "MemTotal:       24683784 kB\nMemAvailable:   23796052 kB\nHugePages_Total: 0\n"
    assert parse_meminfo(meminfo) == {
        "MemTotal": 24683784,
        "MemAvailable": 23796052,
        "HugePages_Total": 0,
    }
    psi = (
        "some avg10=12.50 avg60=3.00 avg300=0.00 total=1\n"
        "full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert parse_psi_some_avg10(psi) == 12.5
    assert parse_psi_some_avg10("") is None


def test_the_agents_cgroup_memory_limit_v1_and_v2(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    (v1 / "agents" / "a1").mkdir(parents=True)
    (v1 / "agents" / "a1" / "memory.limit_in_bytes").write_text(f"{4 << 30}\n")
    mounts = parse_mountinfo(f"35 31 0:32 / {v1} rw - cgroup cgroup rw,memory\n")
    assert memory_limit_of(mounts, {"memory": "/agents/a1"}) == 4 << 30
    (v1 / "agents" / "a1" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory_limit_of(mounts, {"memory": "/agents/a1"}) is None  # unlimited
    v2 = tmp_path / "v2"
    (v2 / "svc").mkdir(parents=True)
    (v2 / "svc" / "memory.max").write_text("max\n")
    mounts = parse_mountinfo(f"30 23 0:26 / {v2} rw - cgroup2 cgroup2 rw\n")
    assert memory_limit_of(mounts, {"": "/svc"}) is None
    (v2 / "svc" / "memory.max").write_text(f"{1 << 30}\n")
    assert memory_limit_of(mounts, {"": "/svc"}) == 1 << 30
    assert memory_limit_of(mounts, {"memory": "/x"}) is None  # not in that hierarchy
