"""The VMM jail on a running platform: `aenv status` says how the node confines its VMs,
and every QEMU of the node runs in a VM cgroup of its own (these hosts: cgroup v1)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform

from ..conftest import qemu_pids_under

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


def _vm_cgroup(pid: int) -> list[str]:
    """The cgroups of `pid` that are a node's VM cgroups (.../aenv-<node>/vm-<name>)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return [line for line in lines if "/aenv-" in line and "/vm-" in line]


async def test_the_node_reports_its_confinement_and_every_qemu_is_in_its_cgroup(
    platform: Platform, sdk_env: None
) -> None:
    env = {**os.environ, "COLUMNS": "250"}
    status = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "aenv_cli", "status", "--home",
                         str(platform.home)], env=env, capture_output=True, text=True,
        timeout=120)
    assert status.returncode == 0, status.stderr
    assert "cgroup v1 (cpu, memory, pids)" in status.stdout or "cgroup v2" in status.stdout

    sandbox = await asyncio.to_thread(Sandbox.create, timeout=300)
    try:
        # Only a process that is QEMU already: the warm pool may be launching one, whose
        # `ip netns exec` and exec step carry QEMU's argv before it joins its cgroup and execs.
        qemus = [pid for pid in qemu_pids_under(platform.home) if _is_qemu(pid)]
        assert qemus
        outside = {pid: Path(f"/proc/{pid}/cgroup").read_text() for pid in qemus
                   if _is_qemu(pid) and not _vm_cgroup(pid)}
        assert not outside, outside
    finally:
        await asyncio.to_thread(sandbox.kill)


def _is_qemu(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe").rsplit("/", 1)[-1].startswith("qemu-system")
    except OSError:  # gone meanwhile
        return False
