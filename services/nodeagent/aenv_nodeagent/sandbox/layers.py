"""A running sandbox's disk chain: freezing its active overlay into a layer (a capture), merging
the layers back into it (compaction), and collecting the layers nothing stands on.

A capture freezes the active qcow2 overlay into `layers/` and the VM continues on a new overlay
over it (an external snapshot, switched while the VM is stopped). Past `max_layers` frozen layers
under a running sandbox they are merged into its overlay in the background (QEMU block-stream).
A layer file is removed only when no snapshot and no sandbox, running or paused, stands on it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.sandbox.background import SandboxTasks
from aenv_nodeagent.sandbox.model import OVERLAY_NODE, Chain, Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.snapshots.store import LayerStore, SnapshotStore, new_layer_id
from aenv_nodeagent.templates import TemplateStore

log = logging.getLogger(__name__)


class NextLayer(NamedTuple):
    """A capture's new disk layer: its id and file, and the overlay the VM continues on."""

    layer: str
    active: str


class DiskLayers:
    """The frozen layers under this node's sandboxes."""

    def __init__(
        self, registry: SandboxRegistry, store: LayerStore, snapshots: SnapshotStore,
        templates: TemplateStore, *, max_layers: int = 8,
    ) -> None:
        self._registry = registry
        self.store = store
        self._snapshots = snapshots
        self._templates = templates
        # Past this many frozen layers under a running sandbox, they are merged into its overlay.
        self.max_layers = max_layers
        self._compactions = SandboxTasks()

    async def next_layer(self, sandbox: Sandbox, chain: Chain) -> NextLayer:
        """The overlay the VM continues on after its active one is frozen as a new layer, made
        while it still runs: its backing is the layer's file, which does not exist yet."""
        layer = new_layer_id()
        following = NextLayer(layer, f"{layer}.active.qcow2")
        await create_overlay(self.store.path(layer), sandbox.directory / following.active,
                             like=sandbox.directory / chain.active)
        return following

    async def freeze(self, sandbox: Sandbox, chain: Chain, following: NextLayer) -> None:
        """Freeze the active overlay as the new layer; the VM (stopped) continues on the
        overlay made for it.

        The frozen file is hard-linked into `layers/`, never renamed: QEMU reopens a node by its
        file name when it reactivates disks after a migration, and must find the same inode.

        :raise AenvError: QEMU did not switch; the layer is gone again.
        """
        frozen = self.store.path(following.layer)
        os.link(sandbox.directory / chain.active, frozen)
        try:
            new_node = f"{OVERLAY_NODE}{chain.overlays_added + 1}"
            await sandbox.vm.switch_disk_to_overlay(
                chain.top_node, new_node, sandbox.directory / following.active)
        except BaseException:
            frozen.unlink(missing_ok=True)
            raise
        chain.overlays_added += 1
        chain.top_node = new_node
        chain.active = following.active
        chain.layers.insert(0, following.layer)

    def compact_if_long(self, sandbox: Sandbox) -> None:
        if len(self._registry.chain(sandbox.sandbox_id).layers) > self.max_layers:
            self._compactions.start(sandbox.sandbox_id, self._compact(sandbox))

    async def compacted(self, sandbox_id: str) -> None:
        """Wait for a compaction of this sandbox, if one runs (operations that change its disk
        chain queue behind it rather than fail)."""
        await self._compactions.done(sandbox_id)

    async def close(self) -> None:
        await self._compactions.cancel_all()

    async def _compact(self, sandbox: Sandbox) -> None:
        """Merge the frozen layers under the sandbox's overlay into it (the VM keeps running);
        the overlay then stands on the template's disk alone. Layers that snapshots still use
        stay on disk for them; the rest are collected."""
        chain = self._registry.chain(sandbox.sandbox_id)
        started = time.perf_counter()
        try:
            template = await self._templates.get(chain.template_id)
            await sandbox.vm.stream_disk(chain.top_node, template.disk)
        except Exception as err:
            log.warning("disk layer compaction failed",
                        extra={"sandbox_id": sandbox.sandbox_id, "error": str(err)})
            return
        merged, chain.layers = chain.layers, []
        self.collect()
        log.info("disk layers compacted", extra={
            "sandbox_id": sandbox.sandbox_id, "layers": len(merged),
            "ms": round((time.perf_counter() - started) * 1000, 1)})

    def collect(self) -> list[str]:
        """Remove the layers no snapshot and no sandbox stands on; returns their ids."""
        in_use = self._snapshots.layers_in_use() | self._registry.layers_in_use()
        return self.store.collect(in_use)
