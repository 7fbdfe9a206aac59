"""A VM that exits on its own is noticed at once (sandbox/watch.py): the sandbox's traffic is cut,
it is removed as a kill removes it, record included, and it dies with a certificate (DIED, its
cause: the fake VM's process was SIGKILLed, but a fake VM tells no exit status, so the cause is
the VMM's crash with its status unknown). Exits of the node's own doing (a kill, or one that
comes while an operation holds the sandbox) are left to that operation.

The sandbox wing runs over fakes, as in tests/sandbox; each fake VM here stands for a real process
(`sleep`), whose SIGKILL is the crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unavailable
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.templates import TemplateStore

from .fakes.envd import FakeEnvd
from .fakes.events import RecordingEvents
from .fakes.network import FakeNetwork
from .fakes.records import RecordingRecords
from .fakes.templates import FakeTemplates
from .fakes.vm import FakeDriver, FakeVm

VMM_CRASH = cluster_pb2.DEATH_CAUSE_VMM_CRASH
WITHIN_S = 1.0


@dataclass(frozen=True)
class Cut:
    """One cut of a sandbox's traffic: when, the words it ends streams with, and whether the
    sandbox's certificate was written by then."""

    sandbox_id: str
    at: float
    why: str
    certified: bool


@dataclass
class Node:
    service: SandboxWing
    records: RecordingRecords
    events: RecordingEvents
    network: FakeNetwork
    state_dir: Path
    cuts: list[Cut] = field(default_factory=list)
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)

    async def create(self) -> tuple[Sandbox, asyncio.subprocess.Process]:
        """A running sandbox whose VM is a real process."""
        spec = cluster_pb2.SandboxSpec(sandbox_id=new_sandbox_id(), template_id="base",
                                       envd_access_token=new_secret())
        sandbox = await self.service.creates.create(spec)
        process = await asyncio.create_subprocess_exec("sleep", "600")
        self.processes.append(process)
        assert isinstance(sandbox.vm, FakeVm)
        sandbox.vm._pid = process.pid  # the fake VM stands for this process
        await asyncio.sleep(0.3)  # a pass of the watch picks it up
        return sandbox, process


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    templates = FakeTemplates(tmp_path / "templates")
    templates.add("base")
    records, network, state_dir = RecordingRecords(), FakeNetwork(), tmp_path / "state"
    events = RecordingEvents(records, "node")
    cuts: list[Cut] = []

    async def cut(sandbox_id: str, why: str = "", /) -> None:
        cuts.append(Cut(sandbox_id, time.monotonic(), why, sandbox_id in events.deaths))

    service = SandboxWing(WingContext.of(
        SandboxSettings(state_dir, ready_timeout_s=5, boot_timeout_s=5),
        SandboxRegistry("node"), records, cast(TemplateStore, templates),
        cast(NetworkManager, network), cast(EnvdClient, FakeEnvd()), cut_traffic=cut,
        events=events), FakeDriver())
    node = Node(service, records, events, network, state_dir, cuts)
    watch = asyncio.create_task(service.exits.run())
    try:
        yield node
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        for process in node.processes:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        await service.destroy_all()


def _died_of(node: Node, sandbox_id: str) -> tuple[int, str] | None:
    """(cause, detail) of the sandbox's death certificate, None while it has none."""
    cert = node.events.deaths.get(sandbox_id)
    return None if cert is None else (cert.cause, cert.detail)


async def _gone(node: Node, sandbox_id: str, within_s: float = 5.0) -> float:
    """Seconds until the node no longer holds the sandbox."""
    started = time.monotonic()
    while node.service.registry.has(sandbox_id) or node.service.registry.is_busy(sandbox_id):
        assert time.monotonic() - started < within_s, "the sandbox is still held"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_a_crashed_vm_s_sandbox_is_cut_removed_and_certified_dead(node: Node) -> None:
    sandbox, process = await node.create()
    crashed = time.monotonic()
    process.send_signal(signal.SIGKILL)
    assert await _gone(node, sandbox.sandbox_id) < WITHIN_S
    cut = next(cut for cut in node.cuts if cut.sandbox_id == sandbox.sandbox_id)
    assert cut.at - crashed < WITHIN_S
    # Certified before the cut, whose streams end saying so.
    assert cut.certified
    assert cut.why == (f"sandbox {sandbox.sandbox_id} died: vmm_crash (qemu exited with a "
                       "status this agent cannot know (it adopted the VM))")
    assert node.service.registry.serving(sandbox.sandbox_id) is None
    assert sandbox.sandbox_id not in node.records.records
    assert _died_of(node, sandbox.sandbox_id) == (
        VMM_CRASH, "qemu exited with a status this agent cannot know (it adopted the VM)")
    died = [e for e in node.events.events if e.type == cluster_pb2.SANDBOX_EVENT_TYPE_DIED]
    assert [(e.sandbox_id, e.cause) for e in died] == [(sandbox.sandbox_id, VMM_CRASH)]
    assert node.network.live == [] and node.network.destroyed == [sandbox.slot]
    assert not (node.state_dir / "sandboxes" / sandbox.sandbox_id).exists()
    assert cast(FakeVm, sandbox.vm).stopping  # shut down: its files are gone too


async def test_the_other_sandboxes_run_on(node: Node) -> None:
    crashing, process = await node.create()
    healthy, _ = await node.create()
    process.send_signal(signal.SIGKILL)
    await _gone(node, crashing.sandbox_id)
    assert node.service.registry.serving(healthy.sandbox_id) is healthy
    assert node.records.records[healthy.sandbox_id].state == cluster_pb2.SANDBOX_STATE_RUNNING


async def test_a_killed_sandbox_is_not_reported_dead(node: Node) -> None:
    sandbox, process = await node.create()
    await node.service.kills.kill(sandbox.sandbox_id)
    process.send_signal(signal.SIGKILL)  # its VM's exit, once the kill ended it
    await asyncio.sleep(0.5)
    assert sandbox.sandbox_id not in node.records.records
    assert _died_of(node, sandbox.sandbox_id) is None


async def test_an_exit_during_an_operation_is_left_to_it_then_dies(node: Node) -> None:
    sandbox, process = await node.create()
    with node.service.registry.exclusive(sandbox.sandbox_id):  # e.g. a pause that fails on it
        process.send_signal(signal.SIGKILL)
        await asyncio.sleep(0.5)
        assert node.service.registry.is_running(sandbox.sandbox_id)
    assert await _gone(node, sandbox.sandbox_id) < WITHIN_S
    assert _died_of(node, sandbox.sandbox_id) is not None


async def test_a_dead_sandbox_whose_removal_fails_is_removed_on_a_later_pass(node: Node) -> None:
    sandbox, process = await node.create()
    node.records.delete_failures.append(Unavailable("etcd is away"))
    process.send_signal(signal.SIGKILL)
    assert await _gone(node, sandbox.sandbox_id) < WITHIN_S
    assert node.service.registry.serving(sandbox.sandbox_id) is None
    assert sandbox.sandbox_id not in node.records.records
    assert _died_of(node, sandbox.sandbox_id) is not None
    # The failed removal's cut came all the same, the later pass's with the death's words;
    # the death was announced once.
    cuts = [cut for cut in node.cuts if cut.sandbox_id == sandbox.sandbox_id]
    assert [(cut.certified, bool(cut.why)) for cut in cuts] == [(True, False), (True, True)]
    died = [e for e in node.events.events if e.type == cluster_pb2.SANDBOX_EVENT_TYPE_DIED]
    assert len(died) == 1


async def test_a_guest_stopped_on_a_full_host_disk_dies_of_it(node: Node) -> None:
    sandbox, _ = await node.create()
    cast(FakeVm, sandbox.vm).fill_disk()
    assert await _gone(node, sandbox.sandbox_id) < WITHIN_S
    assert _died_of(node, sandbox.sandbox_id) == (
        cluster_pb2.DEATH_CAUSE_DISK_FULL, "the host has no room for its disk's writes")
    assert any(cut.sandbox_id == sandbox.sandbox_id and cut.certified for cut in node.cuts)
    assert cast(FakeVm, sandbox.vm).stopping
