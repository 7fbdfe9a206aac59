"""Taking back what an earlier run of the node agent left (after restart/recovery.py cleaned up):
running VMs re-adopted with the disk chains read from QEMU, paused sandboxes and snapshots from
their directories, and the memory images it left to be made from frozen copies."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Internal
from aenv_nodeagent.memory.deferred import finish_interrupted, recorded_copy
from aenv_nodeagent.memory.images import discard_interrupted
from aenv_nodeagent.restart.recovery import BACK, Adopted
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.model import (
    DISK,
    OVERLAY_NODE,
    PAUSED_MARKER,
    ROOT_DISK,
    Chain,
    Paused,
    Sandbox,
)
from aenv_nodeagent.sandbox.paused_transfer import PausedTransfer
from aenv_nodeagent.sandbox.snapshot import Snapshots
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.vmm.frozen import stray_copies

log = logging.getLogger(__name__)


class TakeBack:
    """What a restarted node agent takes over, before it serves anything."""

    def __init__(
        self, wing: WingContext, snapshots: Snapshots, transfers: PausedTransfer,
        kill: Callable[[str], Awaitable[None]],
    ) -> None:
        self._events = wing.events
        self._records = wing.records
        self._registry = wing.registry
        self._templates = wing.templates
        self._layers = wing.disk
        self._snapshots = snapshots
        self._handover = transfers
        self._images = wing.memory_images
        self._sandboxes_dir = wing.sandboxes_dir
        self._kill = kill

    async def adopt(self, adopted: Sequence[Adopted]) -> None:
        """Take over running sandboxes recovered from an earlier run (call before `load`, which
        collects the disk layers no chain uses). Their disk chains are read from QEMU; one that
        cannot be read is killed (`kill`: it dies). One marked lost meanwhile is back: READY."""
        if not adopted:
            return
        # Only captured templates can be under a running VM: none is captured for this.
        templates = {snap.disk: snap.template_id for snap in self._templates.on_disk()}
        for found in adopted:
            sandbox_id = found.record.sandbox_id
            sandbox = Sandbox(found.record, found.slot, found.vm, found.directory)
            try:
                chain = await self._chain_of(found, templates)
            except AenvError as err:
                log.error("adopted sandbox has an unknown disk chain, killing it",
                          extra={"sandbox_id": sandbox_id, "error": err.message})
                self._registry.add_running(sandbox, Chain(found.record.template_id, []))
                await self._kill(sandbox_id)  # its record goes with it
                continue
            self._registry.add_running(sandbox, chain)
            if found.revived:
                await self._events.publish(found.record, cluster_pb2.SANDBOX_EVENT_TYPE_READY,
                                           detail=BACK, revived=True)
            else:
                await self._records.put_sandbox(found.record)
            log.info("running sandbox adopted", extra={"sandbox_id": sandbox_id,
                                                       "pid": found.vm.pid})

    def load(self) -> list[str]:
        """Paused sandboxes and snapshots left by an earlier run (call before anything else but
        `adopt`). Returns the ids of the paused sandboxes found."""
        snapshots = self._snapshots.store.load()
        for snapshot in snapshots:
            if not snapshot.image_pending:
                discard_interrupted(snapshot.directory)
        self._finish_interrupted_images([s for s in snapshots if s.image_pending])
        for snapshot in snapshots:
            self._snapshots.persist_soon(snapshot)  # a push cut short by the last stop
        for marker in self._sandboxes_dir.glob(f"*/{PAUSED_MARKER}"):
            try:
                paused = Paused.read(marker)
            except (OSError, ValueError, KeyError) as err:
                log.error("unreadable paused sandbox", extra={"path": str(marker),
                                                              "error": str(err)})
                continue
            discard_interrupted(paused.directory)
            paused.image_id = paused.record.paused_image
            self._registry.add_paused(paused)
            self._handover.store_soon(paused)  # a push cut short by the last stop
        self._layers.collect()
        return self._registry.paused_ids()

    async def republish_running(self) -> None:
        """Writes the records of the running sandboxes again. Call once the node is registered:
        until its lease stands, the leading scheduler's sweep may mark an adopted sandbox lost
        after `adopt` wrote its record: one marked lost so is back (its certificate withdrawn,
        READY "back with its node")."""
        for sandbox in self._registry.all():
            current = await self._records.get_sandbox(sandbox.sandbox_id)
            if current is not None and current.state == cluster_pb2.SANDBOX_STATE_LOST:
                await self._events.publish(sandbox.record, cluster_pb2.SANDBOX_EVENT_TYPE_READY,
                                           detail=BACK, revived=True)
            else:
                await self._records.put_sandbox(sandbox.record)

    async def _chain_of(self, found: Adopted, templates: Mapping[Path, str]) -> Chain:
        """`templates`: template ids by their disk files.

        :raise Internal: the chain stands on no known template.
        """
        disk = await found.vm.disk_chain(ROOT_DISK.id)
        files = [disk.top_file, *disk.backing_files]
        template_id = next((templates[f] for f in files if f in templates), None)
        if template_id is None:
            raise Internal(f"disk chain {[str(f) for f in files]} stands on no known template")
        # A pooled VM's first overlay is open by descriptor (/dev/fdset/N): it is disk.qcow2.
        active = disk.top_file.name if disk.top_file.parent == found.directory else DISK
        layers = [f.stem for f in disk.backing_files if f.parent == self._layers.store.root]
        added = disk.top_node.removeprefix(OVERLAY_NODE)
        return Chain(template_id, layers, active, disk.top_node,
                     int(added) if added.isdigit() else 0)

    def _finish_interrupted_images(self, pending: list[SnapshotMeta]) -> None:
        """Make the memory images an earlier run left to be made from frozen copies, and kill
        the copies no snapshot needs (that of a fork cut short, or one made just before that
        run died)."""
        copies = {meta.snapshot_id: recorded_copy(meta.directory) for meta in pending}
        needed = frozenset(copy.pid for copy in copies.values() if copy is not None)
        strays = stray_copies(f"{self._sandboxes_dir}/", keep=needed)
        for stray in strays:
            stray.release()
        for meta in pending:
            self._images.build(meta.directory, self._snapshots.deferred_image(
                meta, finish_interrupted(meta.directory, copies[meta.snapshot_id]), {}))
        if pending or strays:
            log.warning("finishing memory images an earlier run left", extra={
                "snapshot_ids": [meta.snapshot_id for meta in pending],
                "copies_found": len(needed), "stray_copies_killed": len(strays)})
