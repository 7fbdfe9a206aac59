"""A node's sandbox wing (`SandboxWing`) assembled over fakes in tmp_path: FakeDriver's VMs,
a fake network, envd and template store, and in-memory cluster records."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.templates import TemplateSnapshot, TemplateStore
from aenv_nodeagent.volumes import VolumeRelays

from ..fakes.envd import FakeEnvd
from ..fakes.events import RecordingEvents
from ..fakes.network import FakeNetwork
from ..fakes.records import RecordingRecords
from ..fakes.templates import FakeTemplates
from ..fakes.vm import FakeDriver, FakeVm
from ..fakes.volumes import loopback_relays

NODE_ID = "fake-node"
TEMPLATE = "base"
RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
FILESYSTEM = cluster_pb2.PAUSE_MODE_FILESYSTEM


@dataclass
class Allocations:
    """Counts the node's allocation publications (the node record, in production); `hold`
    makes them wait until the event it returns is set."""

    published: int = 0
    gate: asyncio.Event | None = None

    async def publish(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.published += 1

    def hold(self) -> asyncio.Event:
        self.gate = asyncio.Event()
        return self.gate

    async def reached(self, count: int, within_s: float = 10.0) -> None:
        """Until `count` were published (a create's is written after its answer)."""
        deadline = time.monotonic() + within_s
        while self.published < count:
            assert time.monotonic() < deadline, f"{self.published} of {count} published"
            await asyncio.sleep(0.001)


@dataclass
class Wing:
    """One node agent's sandbox wing and the fakes behind it (re-creatable: a restart)."""

    service: SandboxWing
    state_dir: Path
    records: RecordingRecords
    templates: FakeTemplates
    template: TemplateSnapshot
    driver: FakeDriver = field(default_factory=FakeDriver)
    network: FakeNetwork = field(default_factory=FakeNetwork)
    envd: FakeEnvd = field(default_factory=FakeEnvd)
    allocations: Allocations = field(default_factory=Allocations)
    relays: VolumeRelays = field(default_factory=loopback_relays)
    successor: Wing | None = None

    def latest(self) -> Wing:
        return self.successor.latest() if self.successor else self

    def spec(self, **fields: object) -> cluster_pb2.SandboxSpec:
        defaults: dict[str, object] = {"sandbox_id": new_sandbox_id(), "template_id": TEMPLATE,
                                       "envd_access_token": new_secret()}
        return cluster_pb2.SandboxSpec(**{**defaults, **fields})  # type: ignore[arg-type]

    async def create(self, **fields: object) -> Sandbox:
        return await self.service.creates.create(self.spec(**fields))

    def directory(self, sandbox_id: str) -> Path:
        return self.state_dir / "sandboxes" / sandbox_id

    def layer_files(self) -> set[str]:
        """The ids of the frozen disk layers on disk."""
        return {path.stem for path in (self.state_dir / "layers").glob("*.qcow2")}

    def vm(self, sandbox: Sandbox) -> FakeVm:
        assert isinstance(sandbox.vm, FakeVm)
        return sandbox.vm

    async def settled(self) -> None:
        """What a pause leaves to the background is done: its VM's quit, then its slot's
        release."""
        await self.service.pauses.settled()
        await self.network.settled()

    async def restart(self) -> Wing:
        """A new node agent over the same state dir and cluster records (templates stay
        cached), after this one's background work ended, as a crash would end it. Nothing is
        taken back yet: that is its `service.takeback.load()`."""
        await self.settled()
        await self.service.context.memory_images.close()
        await self.relays.close()  # they die with the agent
        successor = build_wing(self.state_dir, self.records, self.templates, self.template)
        self.successor = successor
        return successor


def build_wing(
    state_dir: Path, records: RecordingRecords, templates: FakeTemplates,
    template: TemplateSnapshot, pool: WarmPool | None = None, *,
    network: FakeNetwork | None = None,
) -> Wing:
    """The wing; a `pool` of its own must build its slots on the wing's `network`."""
    driver, envd, allocations = FakeDriver(), FakeEnvd(), Allocations()
    network = network or FakeNetwork()
    network.relays = relays = loopback_relays()
    service = SandboxWing(
        WingContext.of(
            SandboxSettings(state_dir, ready_timeout_s=5, boot_timeout_s=5),
            SandboxRegistry(NODE_ID), records, cast(TemplateStore, templates),
            cast(NetworkManager, network), cast(EnvdClient, envd),
            events=RecordingEvents(records, NODE_ID), allocation_changed=allocations.publish),
        driver, pool=pool, relays=relays, publisher=SnapshotPublisher(records, NODE_ID))
    return Wing(service, state_dir, records, templates, template, driver, network, envd,
                allocations, relays)


@pytest.fixture
def templates(tmp_path: Path) -> FakeTemplates:
    """A template store holding the template `base`."""
    store = FakeTemplates(tmp_path / "templates")
    store.add(TEMPLATE)
    return store


@pytest.fixture
async def wing(tmp_path: Path, templates: FakeTemplates) -> AsyncIterator[Wing]:
    template = await templates.get(TEMPLATE)
    first = build_wing(tmp_path / "state", RecordingRecords(), templates, template)
    yield first
    # Background work (a paused VM's quit, a compaction) must not outlive the test's loop.
    # A test may have restarted the node: clean up through the newest one.
    await first.latest().service.destroy_all()
    await first.latest().relays.close()
