"""What every operation of the sandbox wing works with, in one frozen record built once by the
composition root: the node's sandboxes (registry), the cluster's records and the events they
announce, templates, network, envd, the data plane's cut, and this node's stores on disk. Each
operation class takes it, plus only what is its own."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aenv_common.errors import Unavailable
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.memory.capture import CaptureLedger
from aenv_nodeagent.memory.images import MemoryImages
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.sandbox.background import SandboxTasks
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.layers import DiskLayers
from aenv_nodeagent.sandbox.records import ClusterRecords
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.sources import RestoreSources
from aenv_nodeagent.sandbox_metrics import DEFAULT_MAX_SAMPLES
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.snapshots.store import LayerStore, SnapshotStore
from aenv_nodeagent.templates import TemplateStore

log = logging.getLogger(__name__)



class CutTraffic(Protocol):
    """Ends the data plane's connections to a sandbox; `why` (a death's words) ends the Connect
    streams cut, after E2B's own."""

    async def __call__(self, sandbox_id: str, why: str = "", /) -> None: ...


AllocationChanged = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class SandboxSettings:
    """The wing's own knobs (from NodeAgentSettings)."""

    state_dir: Path
    ready_timeout_s: float
    boot_timeout_s: float = 120.0
    max_layers: int = 8
    persist_paused: bool = True
    metrics_max_samples: int = DEFAULT_MAX_SAMPLES
    fork_restores_at_once: int = 0  # 0: one per CPU the agent may run on


async def _nothing(_: str = "", __: str = "", /) -> None:
    return None


@dataclass(frozen=True)
class WingContext:
    """The collaborators the wing's operations share. Build it with `WingContext.of`."""

    settings: SandboxSettings
    registry: SandboxRegistry
    records: ClusterRecords
    templates: TemplateStore
    network: NetworkManager
    envd: EnvdClient
    # Announces every state change (sandbox/events.py).
    events: SandboxEvents
    # Ends the data plane's connections to a sandbox (proxy.py).
    cut_traffic: CutTraffic
    # Publishes the node's allocation; never raises (a later heartbeat publishes it again).
    allocation_changed: AllocationChanged
    snapshot_store: SnapshotStore
    disk: DiskLayers
    memory_images: MemoryImages
    sources: RestoreSources
    # Captures of memory in flight, and the VMs of paused sandboxes quitting.
    ledger: CaptureLedger
    quits: SandboxTasks
    # Snapstore pushes (None: this node has no snapstore).
    persistence: SnapshotPersistence | None

    @classmethod
    def of(
        cls, settings: SandboxSettings, registry: SandboxRegistry, records: ClusterRecords,
        templates: TemplateStore, network: NetworkManager, envd: EnvdClient, *,
        events: SandboxEvents | None = None, cut_traffic: CutTraffic = _nothing,
        allocation_changed: AllocationChanged = _nothing,
        persistence: SnapshotPersistence | None = None,
    ) -> WingContext:
        """The context over these collaborators, with this node's stores under
        `settings.state_dir`. Without `events`, none are announced."""
        snapshots = SnapshotStore(settings.state_dir / "snapshots")
        layers = LayerStore(settings.state_dir / "layers")
        images = MemoryImages()
        return cls(
            settings, registry, records, templates, network, envd,
            events or SandboxEvents.off(records, registry.node_id), cut_traffic,
            _quiet(allocation_changed), snapshots,
            DiskLayers(registry, layers, snapshots, templates, max_layers=settings.max_layers),
            images,
            RestoreSources(registry.node_id, settings.state_dir / "sandboxes", templates, layers,
                           images),
            CaptureLedger(), SandboxTasks(), persistence,
        )

    @property
    def sandboxes_dir(self) -> Path:
        return self.settings.state_dir / "sandboxes"


def _quiet(publish: AllocationChanged) -> AllocationChanged:
    async def published() -> None:
        try:
            await publish()
        except Unavailable:
            pass  # not registered yet: registration publishes the allocation
        except Exception:
            # The periodic heartbeat publishes it again shortly.
            log.warning("publishing the node record failed", exc_info=True)

    return published
