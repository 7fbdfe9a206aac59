"""Snapshots of running sandboxes: the capture, its memory image, its cluster record, its push
to snapstore, and its deletion.

A capture stops the guest only to re-arm its dirty log, save its device state, freeze its disk
layer (sandbox/layers.py) and fork its QEMU; the memory image is made from that frozen copy after
the call returns (memory/capture.py), and a snapshot whose image cannot be made is withdrawn
everywhere. A filesystem-only snapshot keeps just the flushed disk: sandboxes made from it
cold-boot. A snapshot is published to the cluster once taken (never a fork's hidden one), and
pushed to snapstore in the background when the node has one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, NotFound
from aenv_nodeagent.memory.capture import MemoryCapture, pages_fields
from aenv_nodeagent.memory.images import (
    DEVICE_STATE,
    MEMORY,
    MemoryImage,
    partial_image,
    publish_image,
)
from aenv_nodeagent.phases import PhaseTimer, ms_fields
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.layers import NextLayer
from aenv_nodeagent.sandbox.model import Chain, Sandbox
from aenv_nodeagent.sandbox.vms import keep_running
from aenv_nodeagent.snapshots.persistence import layer_file
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.snapshots.store import (
    SNAPSHOT_META,
    SnapshotMeta,
    new_snapshot_id,
)
from aenv_nodeagent.vmm.errors import CaptureLostVm
from aenv_nodeagent.volumes import saved_mounts

log = logging.getLogger(__name__)

SNAPSHOTTED = cluster_pb2.SANDBOX_EVENT_TYPE_SNAPSHOTTED


class Snapshots:
    """Takes, publishes, persists and deletes this node's snapshots."""

    def __init__(self, wing: WingContext, publisher: SnapshotPublisher | None = None) -> None:
        self._registry = wing.registry
        self._events = wing.events
        self._templates = wing.templates
        self.store = wing.snapshot_store
        self._layers = wing.disk
        self._images = wing.memory_images
        self._ledger = wing.ledger
        self._sources = wing.sources
        self._envd = wing.envd
        self._ready_timeout_s = wing.settings.ready_timeout_s
        self._persistence = wing.persistence
        self._publisher = publisher

    async def create(
        self, sandbox_id: str, name: str = "", *, hidden: bool = False,
        filesystem_only: bool = False,
    ) -> SnapshotMeta:
        """Capture a running sandbox, which is stopped only for the capture and continues on a
        new disk overlay; publish the snapshot unless it is `hidden` (a fork's).

        :raise NotFound: no such running sandbox.
        :raise Conflict: it is busy.
        :raise AenvError: the capture failed; the sandbox runs on as before.
        """
        sandbox = self._registry.get(sandbox_id)
        await self._layers.compacted(sandbox_id)
        with self._registry.exclusive(sandbox_id), PhaseTimer.operation(
                "sandbox.snapshot", sandbox.record) as timer:
            meta = await self._capture(sandbox, name, hidden, timer, memory=not filesystem_only)
        self._layers.compact_if_long(sandbox)
        if self._publisher is not None and not hidden:
            await self._publisher.publish(meta, sandbox.record.resources)
            if self.store.find(meta.snapshot_id) is None:  # its image was lost meanwhile
                await self._publisher.withdraw(meta.snapshot_id)
        if not hidden and (running := self._registry.find(sandbox_id)) is not None:
            await self._events.announce(running, SNAPSHOTTED, detail=f"snapshot {meta.snapshot_id}")
        return meta

    async def delete(self, snapshot_id: str) -> None:
        """Remove the snapshot at once (from snapstore and the cluster too); its disk layer
        stays while sandboxes still use it.

        :raise NotFound: the node holds no such snapshot (its record is withdrawn all the same).
        """
        meta = self.store.find(snapshot_id)
        if meta is None:
            # Lost here (its record's withdrawal may have failed then): the record goes now.
            if self._publisher is not None:
                await self._publisher.withdraw(snapshot_id)
            raise NotFound(f"snapshot \"{snapshot_id}\" not found")
        await self._images.cancelled(meta.directory)
        if self._persistence is not None and not meta.hidden:
            self._persistence.forget_soon(snapshot_id)
        self.store.remove(snapshot_id)
        self._layers.collect()
        if self._publisher is not None and not meta.hidden:
            await self._publisher.withdraw(snapshot_id)
        log.info("snapshot deleted", extra={"snapshot_id": snapshot_id})

    async def memory_image(self, snapshot_id: str) -> MemoryImage:
        """A snapshot's memory image, waiting for (or starting) its making.

        :raise NotFound: no such snapshot.
        """
        return await self._sources.materialized(self.store.get(snapshot_id))

    def persist_soon(self, meta: SnapshotMeta) -> None:
        if self._persistence is not None and not meta.hidden:
            self._persistence.persist_soon(meta, lambda: self._persisted_files(meta), self.store)

    async def deferred_image(
        self, meta: SnapshotMeta, making: Coroutine[None, None, MemoryImage],
        timings: Mapping[str, float],
    ) -> MemoryImage:
        """A snapshot's image made after its call returned; the snapshot goes if it cannot be
        made (the guest state it needed is gone with the frozen copy)."""
        started = time.perf_counter()
        try:
            image = await making
        except Exception as err:
            log.error("snapshot lost: its memory image could not be written", extra={
                "snapshot_id": meta.snapshot_id, "sandbox_id": meta.sandbox_id,
                "error": str(err)})
            if self.store.find(meta.snapshot_id) is meta:
                await self._lost(meta)
            raise
        meta.image_pending = False
        self.store.save(meta)
        log.info("snapshot image written", extra={
            "snapshot_id": meta.snapshot_id, "sandbox_id": meta.sandbox_id,
            "ms": round((time.perf_counter() - started) * 1000, 1),
            **ms_fields(timings)})
        return image

    async def _lost(self, meta: SnapshotMeta) -> None:
        if self._persistence is not None and not meta.hidden:
            self._persistence.forget_soon(meta.snapshot_id)
        self.store.remove(meta.snapshot_id)
        self._layers.collect()
        if self._publisher is None or meta.hidden:
            return
        try:
            await self._publisher.withdraw(meta.snapshot_id)
        except AenvError as err:  # the next start's sync withdraws it
            log.warning("cannot withdraw a lost snapshot's record", extra={
                "snapshot_id": meta.snapshot_id, "error": err.message})

    async def _capture(
        self, sandbox: Sandbox, name: str, hidden: bool, timer: PhaseTimer, *, memory: bool,
    ) -> SnapshotMeta:
        chain = self._registry.chain(sandbox.sandbox_id)
        snapshot_id = new_snapshot_id()
        directory = self.store.new_directory(snapshot_id)
        base = await self._sources.running_image(sandbox, chain) if memory else None
        ram = None if base is None else MemoryCapture(
            sandbox.vm, base, partial_image(directory), self._ledger, timer)
        following: NextLayer | None = None
        try:
            if not memory:
                await timer.timed("sync", self._envd.sync(
                    sandbox.host, sandbox.record.envd_access_token,
                    timeout_s=self._ready_timeout_s))
            if ram is not None:  # while the VM runs
                await ram.while_running()
            following = await timer.timed("overlay", self._layers.next_layer(sandbox, chain))
            await timer.timed("stop", sandbox.vm.pause())
            try:
                if ram is not None:
                    await timer.timed("memory", ram.while_stopped(directory))
                elif memory:
                    await timer.timed("memory", sandbox.vm.capture(directory / "state"))
                await timer.timed("disk", self._layers.freeze(sandbox, chain, following))
                if ram is not None:  # the fork of QEMU, started before the disk's freeze
                    await timer.timed("forked", ram.frozen())
            except CaptureLostVm:
                raise  # no VM to run on: the exit watch reports its death
            except BaseException:
                await keep_running(sandbox.vm)
                raise
            await timer.timed("cont", keep_running(sandbox.vm))
            await sandbox.vm.close_writable_fds()  # a pooled VM's first overlay is frozen now
            if ram is not None and not ram.deferred:
                ram.done(publish_image(directory).memory, sandbox.directory)
            meta = await self._meta(sandbox, chain, snapshot_id, directory, name, hidden,
                                    memory=memory, pending=ram is not None and ram.deferred)
            self.store.add(meta)
            if ram is not None and ram.deferred:
                if hidden:  # a fork's: its first children need not wait for the image
                    await ram.fork_delta(directory)
                self._images.build(directory, self.deferred_image(
                    meta, ram.finishing(sandbox.directory), ram.image_timings))
        except BaseException:
            if following is not None and chain.active != following.active:
                (sandbox.directory / following.active).unlink(missing_ok=True)
            self.store.discard_directory(directory)
            raise
        finally:
            if ram is not None:
                await ram.close()
        if memory:  # restores of it are likely (a fork's, certain): make its memory image now
            self._sources.materialize(meta)
        self.persist_soon(meta)
        log.info("snapshot taken", extra={
            "sandbox_id": sandbox.sandbox_id, "snapshot_id": snapshot_id, **timer.fields(),
            **(pages_fields(ram) if ram is not None else {})})
        return meta

    async def _meta(
        self, sandbox: Sandbox, chain: Chain, snapshot_id: str, directory: Path, name: str,
        hidden: bool, *, memory: bool, pending: bool,
    ) -> SnapshotMeta:
        template = await self._templates.get(chain.template_id)
        return SnapshotMeta(
            snapshot_id=snapshot_id, sandbox_id=sandbox.sandbox_id, name=name,
            template_id=chain.template_id,
            template_key=self._templates.inputs(chain.template_id).key(),
            accelerator=template.accelerator, kernel_version=template.kernel_version,
            artifacts_digest=template.artifacts_digest, layers=list(chain.layers),
            guest_token=sandbox.record.envd_access_token,
            envd_version=sandbox.record.envd_version, created_at=time.time(),
            hidden=hidden, has_memory=memory, directory=directory, image_pending=pending,
            volume_mounts=saved_mounts(sandbox.record.volume_mounts),
        )

    async def _persisted_files(self, meta: SnapshotMeta) -> Mapping[str, Path]:
        """What another node needs to restore the snapshot (waits for its memory image)."""
        files = {SNAPSHOT_META: meta.directory / SNAPSHOT_META}
        if meta.has_memory:
            image = await self._sources.materialized(meta)
            files |= {MEMORY: image.memory, DEVICE_STATE: image.device_state}
        return files | {layer_file(layer): self._layers.store.path(layer)
                        for layer in meta.layers}

