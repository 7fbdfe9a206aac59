"""A VM's limits from its shape, and the cgroupfs files that say them: pure."""

from __future__ import annotations

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.confinement.limits import (
    LimitSettings,
    VmShape,
    limits_for,
    v1_files,
    v2_files,
)

MIB = 1 << 20
ALL_V2 = frozenset({"cpu", "io", "memory", "pids"})


def test_vcpus_are_the_cpu_quota_and_ram_plus_overhead_the_memory() -> None:
    limits = limits_for(VmShape(2, 512), LimitSettings(memory_overhead_mib=256, pids_max=300))
    assert (limits.cpu_quota_us, limits.cpu_period_us) == (200_000, 100_000)
    assert limits.memory_bytes == (512 + 256) * MIB
    assert limits.pids_max == 300
    assert limits.io_weight == 200


def test_a_vm_that_freezes_has_room_for_its_frozen_copy_and_tcg_for_its_cache() -> None:
    # A frozen copy keeps the pages the running guest rewrites: up to a second guest RAM.
    limits = limits_for(VmShape(1, 512, freezes=True, vmm_extra_mib=32),
                        LimitSettings(memory_overhead_mib=100))
    assert limits.memory_bytes == (2 * 512 + 32 + 100) * MIB


def test_io_weight_stays_in_cgroup_v2s_range() -> None:
    assert limits_for(VmShape(500, 512), LimitSettings()).io_weight == 10_000


@pytest.mark.parametrize("shape", [VmShape(0, 512), VmShape(1, 0)])
def test_a_shapeless_vm_is_refused(shape: VmShape) -> None:
    with pytest.raises(InvalidArgument):
        limits_for(shape, LimitSettings())


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        LimitSettings(pids_max=0)


def test_v2_files_cover_the_controllers_the_node_has() -> None:
    limits = limits_for(VmShape(2, 1024), LimitSettings(memory_overhead_mib=0, pids_max=64))
    assert v2_files(limits, ALL_V2) == {
        "cpu.max": "200000 100000",
        "io.weight": "default 200",
        "memory.max": str(1024 * MIB),
        "pids.max": "64",
    }
    assert "io.weight" not in v2_files(limits, ALL_V2 - {"io"})


def test_v1_files_per_hierarchy_period_before_quota() -> None:
    limits = limits_for(VmShape(1, 256), LimitSettings(memory_overhead_mib=0, pids_max=64))
    assert list(v1_files(limits, "cpu").items()) == [
        ("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "100000")]
    assert v1_files(limits, "memory") == {"memory.limit_in_bytes": str(256 * MIB)}
    assert v1_files(limits, "pids") == {"pids.max": "64"}
    assert v1_files(limits, "cpuacct") == {}
