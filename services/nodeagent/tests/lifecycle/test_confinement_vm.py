"""A confined node's sandboxes on real QEMU and this host's cgroups: every VM — created, from the
warm pool, a fork child, resumed, adopted after a restart — runs in a cgroup of its own with its
limits; the cgroup goes when its VM does (kill, crash, pause), and the memory limit bites: a
guest that outgrows it loses its QEMU to the OOM killer and the sandbox dies of it (VMM_CRASH,
the host's OOM killer named, told by its cgroup's OOM kill count)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.confinement import VmCgroup
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_testing.records import MemoryRecords

from ..fakes.events import RecordingEvents
from .conftest import Node, node_parts, spec, until
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

MIB = 1 << 20
VMM_CRASH = cluster_pb2.DEATH_CAUSE_VMM_CRASH
# base: 512 MiB of RAM, twice for its frozen copies, TCG's 32 MiB cache, the default overhead.
BASE_MEMORY = str((2 * 512 + 32 + 256) * MIB)


def _cgroup_of(node: Node, sandbox_id: str) -> VmCgroup:
    vm = node.sandboxes.registry.get(sandbox_id).vm
    cgroup = getattr(vm, "cgroup", None)
    assert isinstance(cgroup, VmCgroup), f"{sandbox_id} has no cgroup"
    for directory in cgroup.dirs:
        assert vm.pid in [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    return cgroup


def _memory_file(cgroup: VmCgroup, name_v1: str, name_v2: str) -> Path:
    for directory in cgroup.dirs:
        for name in (name_v1, name_v2):
            if (directory / name).exists():
                return directory / name
    raise AssertionError(f"{cgroup.name} has no memory controller")


def _died(node: Node, sandbox_id: str) -> bool:
    """Removed, its record too, and certified dead."""
    events = node.sandboxes.context.events
    assert isinstance(events, RecordingEvents)
    return (sandbox_id not in node.records.records and sandbox_id in events.deaths
            and not node.sandboxes.registry.has(sandbox_id))


def _death(node: Node, sandbox_id: str) -> tuple[int, str]:
    events = node.sandboxes.context.events
    assert isinstance(events, RecordingEvents)
    return events.deaths[sandbox_id].cause, events.deaths[sandbox_id].detail


def _gone(cgroup: VmCgroup) -> bool:
    return not any(d.exists() for d in cgroup.dirs)


def _events(records: MemoryRecords) -> RecordingEvents:
    return RecordingEvents(records, "test-node")


@contextlib.asynccontextmanager
async def _exit_watch(node: Node) -> AsyncIterator[None]:
    """The node agent's watch on VMs that exit by themselves."""
    task = asyncio.create_task(node.sandboxes.exits.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_every_vm_of_a_sandbox_runs_in_a_cgroup_of_its_own() -> None:
    async with node_parts(pool_vms=1, confined=True, events=_events) as node, _exit_watch(node):
        first = spec()
        await node.sandboxes.creates.create(first)
        made = _cgroup_of(node, first.sandbox_id)
        limit = _memory_file(made, "memory.limit_in_bytes", "memory.max")
        assert limit.read_text().strip() == BASE_MEMORY

        await until(lambda: node.pool.sizes()["vms"] == 1, "pre-started VM", 300)
        pooled = spec()
        assert "pooled_vm" in (await node.sandboxes.creates.create(pooled)).timings_ms
        from_pool = _cgroup_of(node, pooled.sandbox_id)

        results = await node.sandboxes.forks.fork(first.sandbox_id, 2)
        forked = [r for r in results if isinstance(r, Sandbox)]
        assert len(forked) == 2, results
        children = [_cgroup_of(node, r.sandbox_id) for r in forked]
        assert len({c.name for c in [made, from_pool, *children]}) == 4

        await node.sandboxes.pauses.pause(pooled.sandbox_id)
        await node.settled()
        assert _gone(from_pool)
        await node.sandboxes.pauses.resume(pooled.sandbox_id)
        assert _cgroup_of(node, pooled.sandbox_id).name != from_pool.name

        await node.sandboxes.kills.kill(first.sandbox_id)
        # The fork's frozen copy may hold it until its memory image is written.
        await until(lambda: _gone(made), "killed VM's cgroup removed", 120)

        crashed = forked[0].sandbox_id
        os.kill(node.sandboxes.registry.get(crashed).vm.pid, signal.SIGKILL)
        await until(lambda: _died(node, crashed), "crash noticed", 120)
        assert _death(node, crashed) == (VMM_CRASH, "qemu killed by signal 9")
        await until(lambda: _gone(children[0]), "crashed VM's cgroup removed", 60)


async def test_a_guest_past_its_memory_limit_loses_its_vm_to_the_host_s_oom_killer() -> None:
    async with node_parts(confined=True, events=_events) as node, _exit_watch(node):
        s = spec()
        sandbox = await node.sandboxes.creates.create(s)
        cgroup = _cgroup_of(node, s.sandbox_id)
        used = int(_memory_file(cgroup, "memory.usage_in_bytes", "memory.current").read_text())
        _memory_file(cgroup, "memory.limit_in_bytes", "memory.max").write_text(
            str(used + 64 * MIB))
        # tail holds all of an endless line: the guest's memory grows until something stops it.
        hog = asyncio.create_task(sh(node.session, sandbox.host, s.envd_access_token,
                                     "tail /dev/zero", timeout_s=300))
        try:
            await until(lambda: _died(node, s.sandbox_id), "the OOM-killed VM noticed", 300)
            assert _death(node, s.sandbox_id) == (
                VMM_CRASH,
                "qemu killed by the host's OOM killer (its cgroup's oom_kill count rose)")
        finally:
            hog.cancel()
            with contextlib.suppress(BaseException):
                await hog
        await until(lambda: _gone(cgroup), "its cgroup removed", 60)


async def test_an_adopted_sandbox_keeps_its_cgroup_until_it_ends() -> None:
    async with node_parts(confined=True) as node:
        s = spec()
        await node.sandboxes.creates.create(s)
        before = _cgroup_of(node, s.sandbox_id)
        restarted = await node.restart()
        assert _cgroup_of(restarted, s.sandbox_id) == before
        await restarted.sandboxes.kills.kill(s.sandbox_id)
        assert _gone(before)
