"""The node's VM cgroups on this host's real cgroupfs, for tests that need the kernel's (skipped
where the host cannot confine VMs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.confinement import ConfinementUnavailable, LimitSettings, VmCgroups, choose


def open_host_cgroups(state_dir: Path, settings: LimitSettings) -> VmCgroups:
    """The node's cgroups over `state_dir`, as a node agent that requires them opens them."""
    try:
        confinement = choose("required", state_dir, settings)
    except ConfinementUnavailable as err:
        pytest.skip(err.message)
    assert confinement.cgroups is not None
    return confinement.cgroups


@contextlib.contextmanager
def host_cgroups(state_dir: Path, settings: LimitSettings) -> Iterator[VmCgroups]:
    """`open_host_cgroups`; none of the node's cgroups is left after the block."""
    cgroups = open_host_cgroups(state_dir, settings)
    try:
        yield cgroups
    finally:
        cgroups.close()
        assert not any(s.exists() for s in cgroups.slices)
