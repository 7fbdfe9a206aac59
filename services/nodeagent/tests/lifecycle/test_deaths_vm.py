"""Real guests killed each way, each ending with the right death certificate in a real etcd
(EventLog.death) and its DIED event: QEMU SIGKILLed (VMM_CRASH), a guest kernel panic
(GUEST_CRASH), a guest out of memory (GUEST_OOM), an envd that stops answering (GUEST_HANG),
eviction under memory pressure (EVICTED_MEMORY_PRESSURE), a host disk with no room for the
guest's writes (DISK_FULL). One sandbox per test; each leaves nothing behind (node_parts checks:
no QEMU, netns or layer left)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.events import EventLog
from aenv_common.events.log import SANDBOX_EVENTS
from aenv_nodeagent.capacity.eviction import Evictions
from aenv_nodeagent.capacity.host import memory_available_mib
from aenv_nodeagent.sandbox.death_causes import DISK_FULL_SIGBUS
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.liveness import LivenessSettings
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_testing.records import MemoryRecords

from .conftest import Node, node_parts, spec, until
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.etcd]

NODE_ID = "test-node"
CERTIFIED_WITHIN_S = 30.0


@contextlib.asynccontextmanager
async def _node(store: ClusterStore) -> AsyncIterator[tuple[Node, EventLog]]:
    """A node whose events go to etcd, its exit watch running."""
    log = EventLog(store, retention_s=600)

    def events(records: MemoryRecords) -> SandboxEvents:
        return SandboxEvents(records, NODE_ID, log)

    async with node_parts(events=events) as node, _running(node.sandboxes.exits.run()):
        yield node, log


@contextlib.asynccontextmanager
async def _running(work: Coroutine[Any, Any, object]) -> AsyncIterator[None]:
    task = asyncio.ensure_future(work)
    try:
        yield
    finally:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise AssertionError("background work failed") from task.exception()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _certificate(node: Node, log: EventLog, sandbox_id: str) -> c.DeathCertificate:
    """The sandbox's certificate once etcd has it; then (a death is certified before the
    sandbox is removed) the node holds the sandbox no more, and its DIED event says the same
    cause."""
    deadline = asyncio.get_running_loop().time() + CERTIFIED_WITHIN_S
    while (cert := await log.death(sandbox_id)) is None:
        assert asyncio.get_running_loop().time() < deadline, f"{sandbox_id} never certified"
        await asyncio.sleep(0.2)
    await until(lambda: not node.sandboxes.registry.has(sandbox_id), "the sandbox removed", 30)
    assert sandbox_id not in node.records.records
    died = [e for e in await log.events(SANDBOX_EVENTS, sandbox_id)
            if e.type == c.SANDBOX_EVENT_TYPE_DIED]
    assert [(e.cause, e.detail, e.event_id) for e in died] == [
        (cert.cause, cert.detail, cert.event_id)]
    assert (cert.node_id, cert.template_id) == (NODE_ID, BASE_TEMPLATE)
    return cert


@contextlib.asynccontextmanager
async def _in_guest(node: Node, sandbox: Sandbox, script: str) -> AsyncIterator[None]:
    """`script` run in the guest as root while the block runs (it never returns: the guest
    dies or stops under it)."""
    token = sandbox.record.envd_access_token
    async with _running(sh(node.session, sandbox.host, token, script, timeout_s=600)):
        yield


async def test_a_qemu_killed_by_signal_9_is_a_vmm_crash(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        sandbox = await node.sandboxes.creates.create(spec())
        os.kill(sandbox.vm.pid, signal.SIGKILL)
        cert = await _certificate(node, log, sandbox.sandbox_id)
        assert (cert.cause, cert.detail) == (c.DEATH_CAUSE_VMM_CRASH, "qemu killed by signal 9")


async def test_a_guest_kernel_panic_is_a_guest_crash(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        sandbox = await node.sandboxes.creates.create(spec())
        async with _in_guest(node, sandbox, "echo c > /proc/sysrq-trigger"):
            cert = await _certificate(node, log, sandbox.sandbox_id)
        assert (cert.cause, cert.detail) == (
            c.DEATH_CAUSE_GUEST_CRASH, "the guest kernel panicked: sysrq triggered crash")


async def test_a_guest_out_of_memory_is_guest_oom(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        sandbox = await node.sandboxes.creates.create(spec())
        # tail holds all of an endless line: the guest's memory grows until its kernel panics.
        async with _in_guest(node, sandbox, "echo 1 > /proc/sys/vm/panic_on_oom; tail /dev/zero"):
            cert = await _certificate(node, log, sandbox.sandbox_id)
        assert cert.cause == c.DEATH_CAUSE_GUEST_OOM, cert.detail
        assert "Out of memory" in cert.detail


async def test_an_envd_that_stops_answering_is_a_guest_hang(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        settings = LivenessSettings(interval_s=1.0, failures=3, timeout_s=1.0)
        async with _running(node.sandboxes.liveness(settings).run()):
            sandbox = await node.sandboxes.creates.create(spec())
            # envd runs this shell: its parent is stopped a second after the shell ended. On a
            # loaded host that may come before envd answered the call: no answer is fine.
            with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                await sh(node.session, sandbox.host, sandbox.record.envd_access_token,
                         'E=$PPID; setsid sh -c "sleep 1; kill -STOP $E" </dev/null >/dev/null '
                         '2>&1 &', timeout_s=15)
            cert = await _certificate(node, log, sandbox.sandbox_id)
        assert cert.cause == c.DEATH_CAUSE_GUEST_HANG
        assert re.fullmatch(r"envd did not answer /health for \d+ s", cert.detail), cert.detail


async def test_memory_pressure_past_the_threshold_evicts(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        sandbox = await node.sandboxes.creates.create(spec())
        # Above what the host has available: the node is under pressure whatever it frees.
        threshold = memory_available_mib() + (1 << 20)
        evictions = Evictions(node.sandboxes.registry, node.sandboxes.kills.kill, threshold)
        async with _running(evictions.run(0.5)):
            cert = await _certificate(node, log, sandbox.sandbox_id)
        assert cert.cause == c.DEATH_CAUSE_EVICTED_MEMORY_PRESSURE
        assert f"threshold of {threshold} MiB" in cert.detail


@contextlib.contextmanager
def _tiny_disk(directory: Path, size_mib: int) -> Iterator[None]:
    """`directory` on a tmpfs of `size_mib`: the host's disk, full once that much is written."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs",
                    str(directory)], check=True)
    try:
        yield
    finally:
        # Lazily: a QEMU still holding files on it (the test failed early) keeps it until the
        # node's cleanup stops that QEMU.
        subprocess.run(["umount", "-l", str(directory)], check=False)


async def test_a_host_disk_without_room_for_the_guest_s_writes_is_disk_full(
    cluster_store: ClusterStore,
) -> None:
    async with _node(cluster_store) as (node, log):
        with _tiny_disk(node.state_dir / "sandboxes", 48):
            sandbox = await node.sandboxes.creates.create(spec())
            # Zeros are written as data (no detect-zeroes): 128 MiB into a 48 MiB host disk.
            async with _in_guest(node, sandbox,
                                 "dd if=/dev/zero of=/fill bs=1M count=128 conv=fsync"):
                cert = await _certificate(node, log, sandbox.sandbox_id)
        assert (cert.cause, cert.detail) == (
            c.DEATH_CAUSE_DISK_FULL, "the host has no room for its disk's writes")


async def test_a_guest_oom_that_kills_envd_is_guest_oom(cluster_store: ClusterStore) -> None:
    """The OOM killer takes envd (the likeliest victim here), its init exits and the kernel
    panics on that: the console keeps the OOM killer's own line, so the death reads as OOM."""
    async with _node(cluster_store) as (node, log):
        sandbox = await node.sandboxes.creates.create(spec())
        # envd runs this shell (its parent); the call breaks off as envd dies.
        token = sandbox.record.envd_access_token
        work = asyncio.ensure_future(sh(
            node.session, sandbox.host, token,
            "echo 1000 > /proc/$PPID/oom_score_adj; tail /dev/zero", timeout_s=600))
        try:
            cert = await _certificate(node, log, sandbox.sandbox_id)
        finally:
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
        assert cert.cause == c.DEATH_CAUSE_GUEST_OOM, cert.detail
        assert "Attempted to kill init" in cert.detail


async def test_a_qemu_whose_ram_file_finds_no_room_on_the_host_is_disk_full(
    cluster_store: ClusterStore,
) -> None:
    """A cold-booted sandbox maps its RAM from a sparse file in its directory: on a tmpfs (whose
    holes take room once touched) smaller than the guest's RAM, the guest filling its memory
    leaves QEMU a page the host cannot give, and SIGBUS."""
    async with _node(cluster_store) as (node, log):
        with _tiny_disk(node.state_dir / "sandboxes", 256):
            made = await node.sandboxes.creates.create(spec())
            await node.sandboxes.pauses.pause(made.sandbox_id, c.PAUSE_MODE_FILESYSTEM)
            await node.settled()
            sandbox = await node.sandboxes.pauses.resume(made.sandbox_id)  # a cold boot
            async with _in_guest(node, sandbox, "tail /dev/zero"):
                cert = await _certificate(node, log, sandbox.sandbox_id)
        assert (cert.cause, cert.detail) == (c.DEATH_CAUSE_DISK_FULL, DISK_FULL_SIGBUS)
