"""A node's sandbox wing against real parts: QEMU restores of the real `base` template,
real netns slots and the real envd in the guest. State lives in a short /tmp directory (QMP socket
paths are limited to 107 bytes). Every test ends with nothing left: no QEMU, netns or files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest_asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.confinement import LimitSettings, VmCgroups, choose
from aenv_nodeagent.envd_client import EnvdClient, guest_session
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.restart.recovery import recover
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.distribution import TemplateDistribution
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.vmm import QemuDriver, VmJail, detect_accelerator
from aenv_nodeagent.vmm.uids import UidRange, VmUids
from aenv_testing.records import MemoryRecords
from aenv_testing.subnets import free_subnet

# Apart from a node agent's default range, so a platform running on this host never shares one.
JAIL_UIDS = UidRange(1_100_000_000, 4096)


class AllocationSink:
    """Where a node publishes its allocation (the node record in etcd): counts the puts, each
    taking `delay_s`."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.published = 0

    async def publish(self) -> None:
        await asyncio.sleep(self.delay_s)
        self.published += 1


@dataclass
class Node:
    """One node agent's worth of parts over a state directory (re-creatable: a restart)."""

    sandboxes: SandboxWing
    records: MemoryRecords
    network: NetworkManager
    session: aiohttp.ClientSession
    state_dir: Path
    prefix: str
    pool: WarmPool
    node_id: str = "test-node"
    snapstore: str = ""
    templates: TemplateStore | None = None
    saved: SavedTemplates | None = None
    distribution: TemplateDistribution | None = None
    allocation: AllocationSink = field(default_factory=AllocationSink)
    successor: Node | None = None
    cgroups: VmCgroups | None = None  # a cgroup per VM, as the node agent does where it can

    def latest(self) -> Node:
        return self.successor.latest() if self.successor else self

    async def settled(self) -> None:
        """Wait for what a pause leaves to the background: its VM's quit, then its slot."""
        await self.sandboxes.pauses.settled()
        await self.network.settled()

    async def restart(self) -> Node:
        """A new node agent over the same state dir, after this one died without cleaning up."""
        await self.pool.close()  # its refill task would outlive a real crash no more than this
        await self.settled()  # as would a paused VM's quit and its slot's teardown
        network = NetworkManager(self.network.config)
        # The dead agent's background work (memory image splits) ends with it, and so do its
        # QMP sessions (QEMU serves one at a time).
        await self.sandboxes.context.memory_images.close()
        if self.sandboxes.context.persistence is not None:
            await self.sandboxes.context.persistence.close()
        for sandbox in self.sandboxes.registry.all():
            await sandbox.vm.release()
        cgroups = node_cgroups(self.state_dir) if self.cgroups else None
        recovered = await recover(self.node_id, self.state_dir, network, self.records,
                                  list(self.records.records.values()), node_jail(cgroups))
        node = await build_node(self.state_dir, self.prefix, self.session, self.records, network,
                                snapstore=self.snapstore, node_id=self.node_id, cgroups=cgroups)
        await node.sandboxes.takeback.adopt(recovered.adopted)
        node.sandboxes.takeback.load()
        self.successor = node
        return node


async def build_node(
    state_dir: Path, prefix: str, session: aiohttp.ClientSession, records: MemoryRecords,
    network: NetworkManager | None = None, *, pool_slots: int = 0, pool_overlays: int = 0,
    pool_vms: int = 0, pool_guests: int = 0, pool_snapshot_vms: int = 0,
    pool_cidr: str | None = None, snapstore: str = "",
    node_id: str = "test-node", own_templates: bool = False, share_templates: bool = False,
    cgroups: VmCgroups | None = None, events: SandboxEvents | None = None,
) -> Node:
    settings = NodeAgentSettings(state_dir=state_dir)
    driver = QemuDriver(node_jail(cgroups))
    # A pool of its own per node: runs beside it (CI, another suite) have theirs.
    network = network or NetworkManager(NetworkConfig(
        prefix=prefix, pool_cidr=pool_cidr or free_subnet(24)))
    envd = EnvdClient(session)
    # Shared by every run (captures are keyed by their inputs), unless the test builds its own.
    templates_root = state_dir / "templates" if own_templates else (
        settings.resolved_templates_dir())
    base = await base_template_inputs(settings, detect_accelerator(None))
    persistence = SnapshotPersistence(snapstore, retry_delays_s=(0.2,)) if snapstore else None
    saved = SavedTemplates(templates_root / "built", base)
    # Templates built here go to snapstore, and ones this node lacks come from it.
    distribution = (TemplateDistribution(persistence, templates_root, saved)
                    if persistence is not None and share_templates else None)
    templates = TemplateStore(templates_root, network, envd,
                              driver, GuestCommands(session),
                              boot_timeout_s=90, boot_attempts=3, remote=distribution)
    templates.register(base)
    pool = WarmPool(network, state_dir / "pool", slots=pool_slots,
                    overlays_per_backing=pool_overlays, vms_per_template=pool_vms,
                    guests_per_template=pool_guests, snapshot_vms_per_template=pool_snapshot_vms,
                    vm_root=state_dir / "sandboxes")
    pool.start()
    allocation = AllocationSink()
    sandboxes = SandboxWing(
        WingContext.of(SandboxSettings(state_dir, ready_timeout_s=60), SandboxRegistry(node_id),
                       records, templates, network, envd, events=events,
                       allocation_changed=allocation.publish, persistence=persistence),
        driver, pool=pool, publisher=SnapshotPublisher(records, node_id),
        commands=GuestCommands(session))
    return Node(sandboxes, records, network, session, state_dir, prefix, pool, node_id,
                snapstore=snapstore, templates=templates, saved=saved, distribution=distribution,
                allocation=allocation, cgroups=cgroups)


def node_jail(cgroups: VmCgroups | None) -> VmJail:
    """Every VM of these tests jailed, as a node agent jails them (in a uid range of their own)."""
    return VmJail(cgroups, uids=VmUids(JAIL_UIDS))


def node_cgroups(state_dir: Path) -> VmCgroups:
    """The VM cgroups a node agent over `state_dir` keeps (this host must have them)."""
    cgroups = choose("required", state_dir, LimitSettings()).cgroups
    assert cgroups is not None
    return cgroups


def netns_with(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def qemus_under(directory: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "qemu-system"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(directory) in line]


@pytest_asyncio.fixture
async def node() -> AsyncIterator[Node]:
    async with node_parts() as first:
        yield first


@contextlib.asynccontextmanager
async def node_parts(
    *, pool_slots: int = 0, pool_overlays: int = 0, pool_vms: int = 0, pool_guests: int = 0,
    pool_snapshot_vms: int = 0, pool_cidr: str | None = None, snapstore: str = "",
    node_id: str = "test-node",
    records: MemoryRecords | None = None, own_templates: bool = False,
    share_templates: bool = False, confined: bool = False,
    events: Callable[[MemoryRecords], SandboxEvents] | None = None,
) -> AsyncIterator[Node]:
    """A node over fresh state (`events`: its sandbox events over its records; default off)."""
    prefix = "alc" + "".join(secrets.choice("abcdefgh") for _ in range(3)) + "z"
    state_dir = Path(tempfile.mkdtemp(prefix="alc", dir="/tmp"))
    try:
        records = records or MemoryRecords()
        async with guest_session() as session:
            first = await build_node(state_dir, prefix, session, records,
                                     pool_slots=pool_slots, pool_overlays=pool_overlays,
                                     pool_vms=pool_vms, pool_guests=pool_guests,
                                     pool_snapshot_vms=pool_snapshot_vms, pool_cidr=pool_cidr,
                                     snapstore=snapstore,
                                     node_id=node_id, own_templates=own_templates,
                                     share_templates=share_templates,
                                     cgroups=node_cgroups(state_dir) if confined else None,
                                     events=events(records) if events else None)
            try:
                yield first
            finally:
                # A test may have restarted the node: clean up through the newest one.
                current = first.latest()
                await current.sandboxes.destroy_all()
                await current.pool.close()
                await current.network.destroy_orphans(keep=set())
                if current.cgroups is not None:
                    await until(lambda: _closed(current.cgroups), "VM cgroups removed", 120)
        assert qemus_under(state_dir) == []
        assert netns_with(prefix) == []
        assert list((state_dir / "layers").glob("*")) == []
    finally:
        for line in qemus_under(state_dir):
            os.kill(int(line.split()[0]), signal.SIGKILL)  # QEMUs under our own state dir
        shutil.rmtree(state_dir, ignore_errors=True)


def _closed(cgroups: VmCgroups | None) -> bool:
    """Whether the node's cgroups are all gone (a frozen copy still held one a while)."""
    assert cgroups is not None
    cgroups.close()
    return not any(s.exists() for s in cgroups.slices)


def pss_mib(pid: int) -> float:
    """A process's proportional share of host memory (shared pages split between mappers)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no Pss in /proc/{pid}/smaps_rollup")


def spec(**fields: object) -> cluster_pb2.SandboxSpec:
    defaults: dict[str, object] = {"sandbox_id": new_sandbox_id(), "template_id": BASE_TEMPLATE,
                                   "envd_access_token": new_secret()}
    return cluster_pb2.SandboxSpec(**{**defaults, **fields})  # type: ignore[arg-type]
