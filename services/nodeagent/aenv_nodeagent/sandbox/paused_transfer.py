"""A paused sandbox moved between nodes through snapstore: a pause's state pushed so it outlives
this node, and the paused sandbox of a node that is gone taken over here (the rules:
snapshots/paused_claims.py)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, Internal, NotFound, Unavailable
from aenv_nodeagent.memory.images import delta_image
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.model import FILESYSTEM, PAUSED_MARKER, Paused
from aenv_nodeagent.snapshots.paused_claims import (
    claim,
    new_paused_image_id,
    orphaned,
    paused_files,
)
from aenv_nodeagent.snapshots.persistence import (
    place_layers,
    rebase_pulled,
)

log = logging.getLogger(__name__)

CREATED = cluster_pb2.SANDBOX_EVENT_TYPE_CREATED
KILLED = cluster_pb2.SANDBOX_EVENT_TYPE_KILLED


class PausedTransfer:
    """Pushes paused sandboxes to snapstore and takes orphaned ones over from it."""

    def __init__(self, wing: WingContext) -> None:
        self._events = wing.events
        self._registry = wing.registry
        self._records = wing.records
        self._templates = wing.templates
        self._snapshots = wing.snapshot_store
        self._layers = wing.disk
        self._sources = wing.sources
        self._quits = wing.quits
        self._sandboxes_dir = wing.sandboxes_dir
        self._persistence = wing.persistence
        # Paused sandboxes pushed too, so they outlive this node (needs `persistence`).
        self.persist_paused = wing.settings.persist_paused and wing.persistence is not None

    def store_soon(self, paused: Paused) -> None:
        """Push what the pause kept; the record names the manifest once it is complete."""
        if not self.persist_paused or paused.record.paused_image:
            return
        assert self._persistence is not None
        sandbox_id = paused.record.sandbox_id
        paused.image_id = image_id = new_paused_image_id(sandbox_id)
        self._persistence.push_soon(
            image_id, lambda: self._paused_files(paused), lambda: self._stored(paused),
            labels={"sandbox_id": sandbox_id, "template_id": paused.chain.template_id})

    def forget_stored(self, paused: Paused) -> None:
        """The pause's manifest (pushed or in flight): it no longer holds the sandbox's state."""
        if paused.image_id and self._persistence is not None:
            self._persistence.forget_soon(paused.image_id)
            paused.image_id = ""

    async def take_over(self, sandbox_id: str, *, discard: bool = False) -> Paused | None:
        """Claim a paused sandbox whose node is gone: pull its state and own it, still paused
        (`discard`: claim it only to drop its state and record, as a kill does). Announced as
        this node's CREATED (the contract's word for a sandbox a node accepts), or KILLED.

        :raise Unavailable: this node has no snapstore.
        :raise NotFound, Conflict: it is not a sandbox this node may claim
            (snapshots/paused_claims.py).
        :raise Internal: its stored state is gone.
        """
        if self._persistence is None:
            raise Unavailable("this node has no snapstore to take sandboxes over from")
        node_id = self._registry.node_id
        record = await orphaned(self._records, sandbox_id, node_id)
        if discard:
            await claim(self._records, record, node_id)
            self._persistence.forget_soon(record.paused_image)
            await self._records.delete_sandbox(sandbox_id)
            await self._events.announce(record, KILLED, detail=f"its node {record.node_id} "
                                        "was gone, its stored state dropped")
            log.info("orphaned paused sandbox dropped", extra={"sandbox_id": sandbox_id})
            return None
        with self._registry.exclusive(sandbox_id):
            if self._registry.has(sandbox_id):
                raise Conflict(f"sandbox \"{sandbox_id}\" is already on this node")
            paused = await self._pull(record)
            try:
                paused.record = await claim(self._records, record, node_id)
            except BaseException:
                self._registry.remove_paused(sandbox_id)
                shutil.rmtree(paused.directory, ignore_errors=True)
                self._layers.collect()
                raise
            paused.image_id = paused.record.paused_image
            paused.save()
        await self._events.announce(paused, CREATED,
                                    detail=f"taken over from node {record.node_id}, paused")
        log.info("paused sandbox taken over", extra={
            "sandbox_id": sandbox_id, "from_node": record.node_id})
        return paused

    async def _paused_files(self, paused: Paused) -> Mapping[str, Path]:
        await self._quits.done(paused.record.sandbox_id)
        memory = paused.record.pause_mode != FILESYSTEM
        if memory and delta_image(paused.directory) is None:
            await asyncio.shield(self._sources.paused_capture(paused))
        return paused_files(paused.directory, paused.chain.layers, paused.chain.active,
                            self._layers.store, memory=memory)

    async def _stored(self, paused: Paused) -> None:
        sandbox_id = paused.record.sandbox_id
        while True:  # a resume or kill may hold it: it then drops the manifest itself
            try:
                with self._registry.exclusive(sandbox_id):
                    if self._registry.paused(sandbox_id) is not paused:
                        return
                    paused.record.paused_image = paused.image_id
                    paused.save()
                    await self._records.put_sandbox(paused.record)
                    break
            except Conflict:
                await asyncio.sleep(0.05)
        log.info("paused sandbox stored in snapstore",
                 extra={"sandbox_id": sandbox_id, "manifest_id": paused.image_id})

    async def _pull(self, record: cluster_pb2.SandboxRecord) -> Paused:
        """The sandbox's stored state, in place under its directory and registered as paused
        (its layers count as in use from then on)."""
        assert self._persistence is not None
        staging = self._snapshots.staging_directory(record.paused_image)  # cleared at start
        directory = self._sandboxes_dir / record.sandbox_id
        try:
            try:
                files = await self._persistence.pull(record.paused_image, staging)
            except NotFound as err:
                raise Internal(f"paused state of \"{record.sandbox_id}\" is gone from "
                               "snapstore") from err
            stored = Paused.read(files[PAUSED_MARKER])
            template = await self._templates.get(stored.chain.template_id)
            await rebase_pulled(files, stored.chain.layers, self._layers.store, template.disk,
                                top=files[stored.chain.active])
            place_layers(files, stored.chain.layers, self._layers.store)
            self._sandboxes_dir.mkdir(parents=True, exist_ok=True)
            staging.rename(directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            self._layers.collect()
            raise
        paused = Paused(record, directory, stored.chain)
        self._registry.add_paused(paused)
        return paused
