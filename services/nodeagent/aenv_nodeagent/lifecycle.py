"""Pause/resume, snapshots, fork and reset of this node's sandboxes.

Memory: a sandbox maps its base RAM (template, snapshot or its own memory image) copy-on-write
(share=off), and captures write only what the guest changed since (vmm/delta.py): the VM is
stopped for a time that grows with what it dirtied, not with its RAM. A pause writes a delta,
loaded onto the same base at resume. A snapshot's memory image is a sparse copy of the base,
made while the VM still runs, with the changed pages written over it while it is stopped: it is
complete when the call returns, so a fork's children restore at once. A guest that runs on no
image (after a cold boot) gets a full capture, split into an image in the background
(memimage.py). Restores map an image copy-on-write and load only device state, so they share its
pages through the page cache.
Disk: a snapshot freezes the sandbox's active qcow2 overlay into `layers/` and the VM continues on
a new overlay (external snapshot, taken while the VM is stopped); everything restored from the
snapshot gets its own overlay over that layer. Past `max_layers` frozen layers under a running
sandbox, they are merged into its overlay in the background (block-stream).

Pause = capture + QEMU exits + the network slot is released; the sandbox's directory (overlay,
state file, `sandbox.json`) survives node agent restarts. Resume = restore into a new QEMU and
netns, then envd `/init` (clock, RNG reseed, the sandbox's own token). The sandbox id never changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, Conflict, Internal, InvalidArgument, NotFound, Unavailable
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.deferredimage import finish_interrupted, recorded_copy
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.handover import (
    ClusterRecords,
    claim,
    new_paused_image_id,
    orphaned,
    paused_files,
)
from aenv_nodeagent.memcapture import CaptureLedger, MemoryCapture, pages_fields
from aenv_nodeagent.memimage import (
    BASE_MEMORY,
    BASE_STATE,
    DELTA,
    DEVICE_STATE,
    DEVICES,
    MEMORY,
    MemoryImage,
    MemoryImages,
    delta_image,
    discard_delta,
    discard_image,
    discard_interrupted,
    image_in,
    link_into,
    partial_image,
    pin_base,
    publish_image,
)
from aenv_nodeagent.network import NetSlot, NetworkManager
from aenv_nodeagent.pausedmemory import PendingDelta
from aenv_nodeagent.persistence import (
    SnapshotPersistence,
    layer_file,
    place_layers,
    rebase_pulled,
)
from aenv_nodeagent.recovery import PAUSED_MARKER, Adopted
from aenv_nodeagent.sandboxes import (
    DEFAULT_TIMEOUT_S,
    Sandbox,
    SandboxManager,
    Undo,
    boot_from_disk,
    egress_policy,
    launch_restore_target,
    ms_fields,
    timed,
    timestamp,
    validate_spec,
)
from aenv_nodeagent.snapshots import (
    SNAPSHOT_META,
    LayerStore,
    SnapshotMeta,
    SnapshotStore,
    new_layer_id,
    new_snapshot_id,
    write_private_json,
)
from aenv_nodeagent.templates import TemplateInputs, TemplateStore
from aenv_nodeagent.vmm import QemuVm
from aenv_nodeagent.vmm.argv import block_node_name
from aenv_nodeagent.vmm.delta import mapped_memory
from aenv_nodeagent.vmm.frozen import stray_copies
from aenv_nodeagent.vmm.spec import DiskSpec

log = logging.getLogger(__name__)

MAX_FORK_CHILDREN = 100
_FULL = cluster_pb2.PAUSE_MODE_UNSPECIFIED
_FILESYSTEM = cluster_pb2.PAUSE_MODE_FILESYSTEM
_PAUSED_STATE = "paused.state"
_DISK = "disk.qcow2"
# The root disk's block node name in a freshly launched QEMU (overlays added later get others).
_ROOT_DISK = DiskSpec("root", Path("disk.qcow2"), "qcow2", readonly=False)
_ROOT_NODE = block_node_name(_ROOT_DISK)
_OVERLAY_NODE = "ovl"  # + the number of overlays added: the node of a snapshot's new overlay


@dataclass
class Chain:
    """What a sandbox's disk and RAM stand on: its template, the frozen layers under its overlay
    (newest first), and the block node QEMU currently writes to."""

    template_id: str
    layers: list[str]
    # The overlay the VM writes to, a file in the sandbox's directory.
    active: str = _DISK
    top_node: str = _ROOT_NODE
    overlays_added: int = 0


@dataclass
class Paused:
    record: cluster_pb2.SandboxRecord
    directory: Path
    chain: Chain
    # The snapstore manifest its state is pushed to (handover.py); "" while none is.
    image_id: str = ""


@dataclass(frozen=True)
class RestoreImage:
    """What a guest comes back from: a memory image and device state, or (both None) nothing
    but its disk, so it cold-boots."""

    inputs: TemplateInputs
    memory: Path | None
    state: Path | None
    # The token the captured envd enforces: /init must present it to hand over a new one.
    guest_token: str


def boot_image(inputs: TemplateInputs) -> RestoreImage:
    return RestoreImage(inputs, None, None, guest_token="")


class SandboxLifecycle:
    def __init__(
        self,
        manager: SandboxManager,
        templates: TemplateStore,
        network: NetworkManager,
        envd: EnvdClient,
        records: ClusterRecords,
        state_dir: Path,
        *,
        ready_timeout_s: float,
        boot_timeout_s: float = 120.0,
        max_layers: int = 8,
        persistence: SnapshotPersistence | None = None,
        persist_paused: bool = True,
    ) -> None:
        self._manager = manager
        self._templates = templates
        self._network = network
        self._envd = envd
        self._records = records
        self._sandboxes_dir = state_dir / "sandboxes"
        self._ready_timeout_s = ready_timeout_s
        self._boot_timeout_s = boot_timeout_s
        self.snapshots = SnapshotStore(state_dir / "snapshots")
        self.layers = LayerStore(state_dir / "layers")
        self.memory_images = MemoryImages()
        self._paused: dict[str, Paused] = {}
        self._chains: dict[str, Chain] = {}
        # Past this many frozen layers under a running sandbox, they are merged into its overlay.
        self.max_layers = max_layers
        self._compactions: dict[str, asyncio.Task[None]] = {}
        self._ledger = CaptureLedger()
        self._quitting: dict[str, asyncio.Task[None]] = {}  # paused sandboxes' VMs
        # Snapstore: snapshots pushed in the background, pulled when not held here (None: off).
        self.persistence = persistence
        # Paused sandboxes pushed too, so they outlive this node (needs `persistence`).
        self.persist_paused = persist_paused and persistence is not None
        # Set by the node: withdraws the cluster record of a snapshot whose image could not be
        # made after its call returned.
        self.on_snapshot_lost: Callable[[str], Awaitable[None]] | None = None
        manager.on_expired = self.expire

    # --- queries -------------------------------------------------------------------------------

    def record(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        if paused := self._paused.get(sandbox_id):
            return paused.record
        return self._manager.get(sandbox_id).record

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        running = [sbx.record for sbx in self._manager.all()
                   if sbx.record.sandbox_id not in self._paused]
        return running + [p.record for p in self._paused.values()]

    def paused_ids(self) -> list[str]:
        return list(self._paused)

    # --- create / kill -------------------------------------------------------------------------

    async def create(self, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        """From a template, or from a snapshot when `template_id` names one."""
        snapshot = self.snapshots.find(spec.template_id) or await self._pull(spec.template_id)
        if snapshot is None:
            sandbox = await self._manager.create(spec)
            self._chains[spec.sandbox_id] = Chain(spec.template_id, [])
            return sandbox
        async with self._manager.exclusive(spec.sandbox_id):
            return await self._create_from(self.snapshots.get(spec.template_id), spec)

    async def _pull(self, snapshot_id: str) -> SnapshotMeta | None:
        """A snapshot this node lacks, from snapstore (never asked for a known template)."""
        if self.persistence is None or self._templates.has(snapshot_id):
            return None
        return await self.persistence.fetch(
            snapshot_id, self.snapshots, self.layers, self._template_disk)

    async def _template_disk(self, template_id: str) -> Path:
        return (await self._templates.get(template_id)).disk

    async def kill(self, sandbox_id: str) -> None:
        if paused := self._paused.get(sandbox_id):
            async with self._manager.exclusive(sandbox_id):
                await self._quitted(sandbox_id)
                self._paused.pop(sandbox_id, None)
                self._forget_stored(paused)
                await self.memory_images.cancelled(paused.directory)
                shutil.rmtree(paused.directory, ignore_errors=True)
                await self._records.delete_sandbox(sandbox_id)
        else:
            await self._manager.kill(sandbox_id)
        self._chains.pop(sandbox_id, None)
        self.collect_layers()
        log.info("sandbox killed", extra={"sandbox_id": sandbox_id})

    async def expire(self, sandbox_id: str) -> None:
        """Timeout: pause when the sandbox asked for it (lifecycle.auto_pause), else kill."""
        sandbox = self._manager.find(sandbox_id)
        if sandbox is not None and sandbox.record.lifecycle.auto_pause:
            await self.pause(sandbox_id, mode=sandbox.record.lifecycle.auto_pause_mode)
        else:
            await self.kill(sandbox_id)

    async def destroy_all(self) -> None:
        """Everything on this node: running and paused sandboxes, snapshots, layers."""
        await self.memory_images.close()
        for task in list(self._compactions.values()):
            task.cancel()
        await asyncio.gather(*self._compactions.values(), return_exceptions=True)
        await self._manager.kill_all()
        for sandbox_id in list(self._paused):
            await self.kill(sandbox_id)
        for meta in list(self.snapshots.listed()):
            self.snapshots.remove(meta.snapshot_id)
        self._chains.clear()
        self.collect_layers()
        await self.settled()
        await self._network.settled()
        if self.persistence is not None:  # last: the kills' deletes from snapstore finish
            await self.persistence.close()

    # --- pause / resume ------------------------------------------------------------------------

    async def pause(
        self, sandbox_id: str, mode: cluster_pb2.PauseMode = _FULL
    ) -> cluster_pb2.SandboxRecord:
        """Stop the guest keeping memory and disk, or (filesystem mode) only its flushed disk."""
        if sandbox_id in self._paused:
            raise Conflict(f"sandbox \"{sandbox_id}\" is already paused")
        sandbox = self._manager.get(sandbox_id)
        await self.compacted(sandbox_id)
        async with self._manager.exclusive(sandbox_id):
            timings: dict[str, float] = {}
            delta: PendingDelta | None = None  # to write before the VM quits
            if mode == _FILESYSTEM:
                await timed(timings, "sync", self._sync(sandbox))
            else:
                try:
                    delta = await self._capture_paused(sandbox, timings)
                except BaseException:
                    await _keep_running(sandbox.vm)
                    raise
            self._ledger.retire(sandbox.vm)
            self._quit_soon(sandbox, delta)
            record = sandbox.record
            record.state = cluster_pb2.SANDBOX_STATE_PAUSED
            record.pause_mode = mode
            paused = Paused(record, sandbox.directory, self._chain(sandbox_id))
            if mode == _FILESYSTEM:
                _discard_memory(paused.directory)
            elif delta is None:  # the images it ran on go; the capture is split into its own
                discard_image(paused.directory)
                discard_delta(paused.directory)
                self._paused_image(paused)
            self._save(paused)
            # Paused before it is detached: a lookup during the detach's await must find it.
            self._paused[sandbox_id] = paused
            await timed(timings, "detach", self._manager.detach(sandbox_id))
            await timed(timings, "publish", self._records.put_sandbox(record))
            self._store_soon(paused)
        log.info("sandbox paused", extra={"sandbox_id": sandbox_id, **ms_fields(timings)})
        return record

    def _quit_soon(self, sandbox: Sandbox, delta: PendingDelta | None) -> None:
        """Write a paused sandbox's memory delta (if its pause left one to write), quit its VM,
        then release its slot, in the background: the guest is stopped and its disk flushed, so
        the pause need not wait. What needs its files (a resume, a kill, a push to snapstore)
        waits in `_quitted`."""
        sandbox_id = sandbox.record.sandbox_id

        async def quit_and_release() -> None:
            try:
                if delta is not None:
                    await self._write_delta(sandbox_id, delta)
                await sandbox.vm.shutdown()
            except Exception as err:  # shutdown ends with SIGKILL: only bookkeeping can fail
                log.warning("paused VM did not quit cleanly",
                            extra={"sandbox_id": sandbox_id, "error": str(err)})
            finally:
                self._network.release_slot(sandbox.slot)

        task = asyncio.ensure_future(quit_and_release())
        self._quitting[sandbox_id] = task
        task.add_done_callback(lambda _: self._quitting.pop(sandbox_id, None)
                               if self._quitting.get(sandbox_id) is task else None)

    async def _write_delta(self, sandbox_id: str, delta: PendingDelta) -> None:
        started = time.perf_counter()
        try:
            pages = await asyncio.to_thread(delta.write)
        except Exception as err:  # it stays paused; a resume reports the missing memory
            log.error("paused sandbox lost its memory: it could not be written",
                      extra={"sandbox_id": sandbox_id, "error": str(err)})
            return
        log.info("paused memory written", extra={
            "sandbox_id": sandbox_id, "delta_pages": pages,
            "write_ms": round((time.perf_counter() - started) * 1000, 1)})

    async def _quitted(self, sandbox_id: str) -> None:
        if task := self._quitting.get(sandbox_id):
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def settled(self) -> None:
        """Wait for the VMs of paused sandboxes to have quit."""
        await asyncio.gather(*self._quitting.values(), return_exceptions=True)

    async def resume(self, sandbox_id: str, timeout_s: int = 0, *, reboot: bool = False) -> Sandbox:
        """Restore a paused sandbox under the same id, or cold-boot it from its disk (`reboot`,
        and always after a filesystem-only pause). On failure it stays paused, intact."""
        paused = self._paused.get(sandbox_id)
        if paused is None:
            self._manager.get(sandbox_id)  # NotFound for unknown ids
            raise Conflict(f"sandbox \"{sandbox_id}\" is not paused")
        async with self._manager.exclusive(sandbox_id):
            record = cluster_pb2.SandboxRecord()
            record.CopyFrom(paused.record)
            timings: dict[str, float] = {}
            await timed(timings, "previous_quit", self._quitted(sandbox_id))
            booting = reboot or record.pause_mode == _FILESYSTEM
            try:
                image = await self._resume_image(paused, booting, timings)
                slot, vm = await self._resume_vm(paused, image, record, timings)
            except AenvError as err:
                raise type(err)(f"resume of \"{sandbox_id}\" failed, it stays paused: "
                                f"{err.message}") from err
            if booting:  # the memory it was paused with (if any) is of no use any more
                await self.memory_images.cancelled(paused.directory)
                _discard_memory(paused.directory)
            else:  # loaded: what stays is the base the VM maps now
                (paused.directory / DELTA).unlink(missing_ok=True)
            record.state = cluster_pb2.SANDBOX_STATE_RUNNING
            record.pause_mode = _FULL
            record.paused_image = ""
            record.end_at.CopyFrom(timestamp(time.time() + (timeout_s or DEFAULT_TIMEOUT_S)))
            sandbox = Sandbox(record, slot, vm, paused.directory, timings)
            del self._paused[sandbox_id]
            self._chains[sandbox_id] = Chain(paused.chain.template_id, paused.chain.layers,
                                             paused.chain.active)
            (paused.directory / PAUSED_MARKER).unlink(missing_ok=True)
            await timed(timings, "publish", self._manager.register(sandbox))
            self._forget_stored(paused)
        log.info("sandbox resumed", extra={"sandbox_id": sandbox_id, **ms_fields(timings)})
        return sandbox

    async def _resume_image(
        self, paused: Paused, booting: bool, timings: dict[str, float]
    ) -> RestoreImage:
        inputs = self._templates.inputs(paused.chain.template_id)
        if booting:
            return boot_image(inputs)
        if (delta := delta_image(paused.directory)) is not None:
            return RestoreImage(inputs, delta.memory, delta.device_state,
                                paused.record.envd_access_token)
        memory = await timed(timings, "memory_image", asyncio.shield(self._paused_image(paused)))
        return RestoreImage(inputs, memory.memory, memory.device_state,
                            paused.record.envd_access_token)

    async def _resume_vm(
        self, paused: Paused, image: RestoreImage, record: cluster_pb2.SandboxRecord,
        timings: dict[str, float],
    ) -> tuple[NetSlot, QemuVm]:
        slot = await timed(timings, "network",
                           self._manager.new_slot(egress_policy(record.network)))
        try:
            vm = await self._restore(paused.directory, slot, image, record, timings,
                                     paused.chain.active)
        except BaseException:
            await self._network.destroy_slot(slot)
            raise
        return slot, vm

    # --- paused sandboxes in snapstore (handover.py) ---------------------------------------------

    def _store_soon(self, paused: Paused) -> None:
        """Push what the pause kept; the record names the manifest once it is complete."""
        if not self.persist_paused or paused.record.paused_image:
            return
        assert self.persistence is not None
        sandbox_id = paused.record.sandbox_id
        paused.image_id = image_id = new_paused_image_id(sandbox_id)
        self.persistence.push_soon(
            image_id, lambda: self._paused_files(paused), lambda: self._stored(paused),
            labels={"sandbox_id": sandbox_id, "template_id": paused.chain.template_id})

    async def _paused_files(self, paused: Paused) -> Mapping[str, Path]:
        await self._quitted(paused.record.sandbox_id)
        memory = paused.record.pause_mode != _FILESYSTEM
        if memory and delta_image(paused.directory) is None:
            await asyncio.shield(self._paused_image(paused))
        return paused_files(paused.directory, paused.chain.layers, paused.chain.active,
                            self.layers, memory=memory)

    async def _stored(self, paused: Paused) -> None:
        sandbox_id = paused.record.sandbox_id
        while True:  # a resume or kill may hold it: it then drops the manifest itself
            try:
                async with self._manager.exclusive(sandbox_id):
                    if self._paused.get(sandbox_id) is not paused:
                        return
                    paused.record.paused_image = paused.image_id
                    self._save(paused)
                    await self._records.put_sandbox(paused.record)
                    break
            except Conflict:
                await asyncio.sleep(0.05)
        log.info("paused sandbox stored in snapstore",
                 extra={"sandbox_id": sandbox_id, "manifest_id": paused.image_id})

    def _forget_stored(self, paused: Paused) -> None:
        """The pause's manifest (pushed or in flight): it no longer holds the sandbox's state."""
        if paused.image_id and self.persistence is not None:
            self.persistence.forget_soon(paused.image_id)
            paused.image_id = ""

    async def take_over(self, sandbox_id: str, *, discard: bool = False) -> Paused | None:
        """Claim a paused sandbox whose node is gone: pull its state and own it, still paused
        (`discard`: claim it only to drop its state and record, as a kill does)."""
        if self.persistence is None:
            raise Unavailable("this node has no snapstore to take sandboxes over from")
        record = await orphaned(self._records, sandbox_id, self._manager.node_id)
        if discard:
            await claim(self._records, record, self._manager.node_id)
            self.persistence.forget_soon(record.paused_image)
            await self._records.delete_sandbox(sandbox_id)
            log.info("orphaned paused sandbox dropped", extra={"sandbox_id": sandbox_id})
            return None
        async with self._manager.exclusive(sandbox_id):
            if sandbox_id in self._paused or self._manager.find(sandbox_id):
                raise Conflict(f"sandbox \"{sandbox_id}\" is already on this node")
            paused = await self._pull_paused(record)
            try:
                paused.record = await claim(self._records, record, self._manager.node_id)
            except BaseException:
                self._paused.pop(sandbox_id, None)
                shutil.rmtree(paused.directory, ignore_errors=True)
                self.collect_layers()
                raise
            paused.image_id = paused.record.paused_image
            self._save(paused)
        log.info("paused sandbox taken over", extra={
            "sandbox_id": sandbox_id, "from_node": record.node_id})
        return paused

    async def _pull_paused(self, record: cluster_pb2.SandboxRecord) -> Paused:
        """The sandbox's stored state, in place under its directory and registered as paused
        (its layers count as in use from then on)."""
        assert self.persistence is not None
        staging = self.snapshots.staging_directory(record.paused_image)  # cleared at start
        directory = self._sandboxes_dir / record.sandbox_id
        try:
            try:
                files = await self.persistence.pull(record.paused_image, staging)
            except NotFound as err:
                raise Internal(f"paused state of \"{record.sandbox_id}\" is gone from "
                               "snapstore") from err
            stored = _read_paused(files[PAUSED_MARKER])
            template = await self._templates.get(stored.chain.template_id)
            await rebase_pulled(files, stored.chain.layers, self.layers, template.disk,
                                top=files[stored.chain.active])
            place_layers(files, stored.chain.layers, self.layers)
            self._sandboxes_dir.mkdir(parents=True, exist_ok=True)
            staging.rename(directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            self.collect_layers()
            raise
        paused = Paused(record, directory, stored.chain)
        self._paused[record.sandbox_id] = paused
        return paused

    # --- snapshots -----------------------------------------------------------------------------

    async def create_snapshot(
        self, sandbox_id: str, name: str = "", *, hidden: bool = False,
        filesystem_only: bool = False,
    ) -> SnapshotMeta:
        """Capture a running sandbox; it is stopped only for the capture, then continues on a new
        disk overlay. A filesystem-only capture keeps just the flushed disk: sandboxes created
        from it cold-boot."""
        sandbox = self._manager.get(sandbox_id)
        await self.compacted(sandbox_id)
        async with self._manager.exclusive(sandbox_id):
            meta = await self._capture(sandbox, name, hidden, memory=not filesystem_only)
        if len(self._chain(sandbox_id).layers) > self.max_layers:
            self._compact_soon(sandbox)
        return meta

    def _compact_soon(self, sandbox: Sandbox) -> None:
        sandbox_id = sandbox.record.sandbox_id
        if sandbox_id not in self._compactions:
            task = asyncio.ensure_future(self._compact(sandbox))
            self._compactions[sandbox_id] = task
            task.add_done_callback(lambda _: self._compactions.pop(sandbox_id, None))

    async def compacted(self, sandbox_id: str) -> None:
        """Wait for a layer compaction of this sandbox, if one runs (operations that change its
        disk chain queue behind it rather than fail)."""
        if task := self._compactions.get(sandbox_id):
            await asyncio.gather(task, return_exceptions=True)

    async def _compact(self, sandbox: Sandbox) -> None:
        """Merge the frozen layers under the sandbox's overlay into it (QEMU block-stream, the VM
        keeps running); the overlay then stands on the template's disk alone. Layers that
        snapshots still use stay on disk for them; the rest are collected."""
        sandbox_id = sandbox.record.sandbox_id
        chain = self._chain(sandbox_id)
        started = time.perf_counter()
        try:
            template = await self._templates.get(chain.template_id)
            await sandbox.vm.stream_disk(chain.top_node, template.disk)
        except Exception as err:
            log.warning("disk layer compaction failed",
                        extra={"sandbox_id": sandbox_id, "error": str(err)})
            return
        merged, chain.layers = chain.layers, []
        self.collect_layers()
        log.info("disk layers compacted", extra={
            "sandbox_id": sandbox_id, "layers": len(merged),
            "ms": round((time.perf_counter() - started) * 1000, 1)})

    async def _capture(
        self, sandbox: Sandbox, name: str, hidden: bool, *, memory: bool = True
    ) -> SnapshotMeta:
        sandbox_id = sandbox.record.sandbox_id
        chain = self._chain(sandbox_id)
        template = await self._templates.get(chain.template_id)
        snapshot_id = new_snapshot_id()
        directory = self.snapshots.new_directory(snapshot_id)
        timings: dict[str, float] = {}
        base = await self._running_image(sandbox) if memory else None
        ram = None if base is None else MemoryCapture(
            sandbox.vm, base, partial_image(directory), self._ledger, timings)
        following: _NextLayer | None = None
        try:
            if not memory:
                await timed(timings, "sync", self._sync(sandbox))
            if ram is not None:  # while the VM runs
                await ram.while_running()
            following = await timed(timings, "overlay", self._next_layer(sandbox, chain))
            await timed(timings, "stop", sandbox.vm.pause())
            try:
                if ram is not None:
                    await timed(timings, "memory", ram.while_stopped(directory))
                elif memory:
                    await timed(timings, "memory", sandbox.vm.capture(directory / "state"))
                await timed(timings, "disk", self._freeze_disk(sandbox, chain, following))
                if ram is not None:  # the fork of QEMU, started before the disk's freeze
                    await timed(timings, "forked", ram.frozen())
            finally:
                await timed(timings, "cont", _keep_running(sandbox.vm))
            await sandbox.vm.close_writable_fds()  # a pooled VM's first overlay is frozen now
            if ram is not None and not ram.deferred:
                ram.done(publish_image(directory).memory, sandbox.directory)
            meta = SnapshotMeta(
                snapshot_id=snapshot_id, sandbox_id=sandbox_id, name=name,
                template_id=chain.template_id, template_key=self._templates.inputs(
                    chain.template_id).key(),
                accelerator=template.accelerator, kernel_version=template.kernel_version,
                artifacts_digest=template.artifacts_digest, layers=list(chain.layers),
                guest_token=sandbox.record.envd_access_token,
                envd_version=sandbox.record.envd_version, created_at=time.time(),
                hidden=hidden, has_memory=memory, directory=directory,
                image_pending=ram is not None and ram.deferred,
            )
            self.snapshots.add(meta)
            if ram is not None and ram.deferred:
                self.memory_images.build(directory, self._deferred_image(
                    meta, ram.finishing(sandbox.directory), ram.image_timings))
        except BaseException:
            if following is not None and chain.active != following.active:
                (sandbox.directory / following.active).unlink(missing_ok=True)
            self.snapshots.discard_directory(directory)
            raise
        finally:
            if ram is not None:
                await ram.close()
        if memory:  # restores of it are likely (a fork's, certain): make its memory image now
            self._materialize(meta)
        self._persist_soon(meta)
        log.info("snapshot taken", extra={
            "sandbox_id": sandbox_id, "snapshot_id": snapshot_id, **ms_fields(timings),
            **(pages_fields(ram) if ram is not None else {})})
        return meta

    async def _deferred_image(
        self, meta: SnapshotMeta, making: Coroutine[None, None, MemoryImage],
        timings: dict[str, float],
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
            if self.snapshots.find(meta.snapshot_id) is meta:
                if self.persistence is not None and not meta.hidden:
                    self.persistence.forget_soon(meta.snapshot_id)
                self.snapshots.remove(meta.snapshot_id)
                self.collect_layers()
                await self._withdraw(meta)
            raise
        meta.image_pending = False
        self.snapshots.save(meta)
        log.info("snapshot image written", extra={
            "snapshot_id": meta.snapshot_id, "sandbox_id": meta.sandbox_id,
            "ms": round((time.perf_counter() - started) * 1000, 1), **ms_fields(timings)})
        return image

    async def _withdraw(self, meta: SnapshotMeta) -> None:
        if self.on_snapshot_lost is None or meta.hidden:
            return
        try:
            await self.on_snapshot_lost(meta.snapshot_id)
        except AenvError as err:  # the next start's sync withdraws it
            log.warning("cannot withdraw a lost snapshot's record", extra={
                "snapshot_id": meta.snapshot_id, "error": err.message})

    async def _capture_paused(
        self, sandbox: Sandbox, timings: dict[str, float]
    ) -> PendingDelta | None:
        """Stop the guest and save its device state: its memory is a delta onto the image the
        VM runs on, written after the pause returns (pausedmemory.py). Or a full capture into
        `paused.state` (None) when it runs on none (after a cold boot)."""
        directory = sandbox.directory
        prepared = time.perf_counter()
        base = await self._running_image(sandbox)
        if base is None:
            await timed(timings, "capture", sandbox.vm.capture(directory / _PAUSED_STATE))
            return None
        base = pin_base(base, directory)
        discard_image(directory)  # its own image, if it ran on one, is pinned as the base now
        (directory / DELTA).unlink(missing_ok=True)
        dirty = await asyncio.to_thread(self._ledger.since_mapped, sandbox.vm, base.memory)
        timings["prepare"] = (time.perf_counter() - prepared) * 1000
        pending = PendingDelta(sandbox.vm.pid, directory, dirty)
        try:
            await timed(timings, "stop", sandbox.vm.pause())
            await timed(timings, "devices", sandbox.vm.save_device_state(directory / DEVICES))
        except BaseException:
            pending.close()
            (directory / DEVICES).unlink(missing_ok=True)
            raise
        return pending

    async def _running_image(self, sandbox: Sandbox) -> MemoryImage | None:
        """The memory image the sandbox's RAM maps and its device state: the template's, a
        snapshot's, or its own (pinned or not); None for a cold boot's RAM."""
        try:
            memory = mapped_memory(sandbox.vm.pid)
        except Internal:
            return None
        template = await self._templates.get(self._chain(sandbox.record.sandbox_id).template_id)
        if _same_file(memory, template.memory):
            image = MemoryImage(template.memory, template.state)
        elif memory.name == BASE_MEMORY:
            image = MemoryImage(memory, memory.with_name(BASE_STATE))
        elif memory.name == MEMORY:
            image = image_in(memory.parent)
        else:
            return None
        return image if all(path.is_file() for path in image) else None

    async def _next_layer(self, sandbox: Sandbox, chain: Chain) -> _NextLayer:
        """The overlay the VM continues on after its active one is frozen as a new layer, made
        while it still runs: its backing is the layer's file, which does not exist yet."""
        layer = new_layer_id()
        following = _NextLayer(layer, self.layers.path(layer), f"{layer}.active.qcow2")
        await create_overlay(following.frozen, sandbox.directory / following.active,
                             like=sandbox.directory / chain.active)
        return following

    async def _freeze_disk(self, sandbox: Sandbox, chain: Chain, following: _NextLayer) -> None:
        """Freeze the active overlay as the new layer; the VM (stopped) continues on the
        overlay made for it.

        The frozen file is hard-linked into `layers/`, never renamed: QEMU reopens a node by its
        file name when it reactivates disks after a migration, and must find the same inode."""
        os.link(sandbox.directory / chain.active, following.frozen)
        try:
            new_node = f"{_OVERLAY_NODE}{chain.overlays_added + 1}"
            await sandbox.vm.switch_disk_to_overlay(
                chain.top_node, new_node, sandbox.directory / following.active)
        except BaseException:
            following.frozen.unlink(missing_ok=True)
            raise
        chain.overlays_added += 1
        chain.top_node = new_node
        chain.active = following.active
        chain.layers.insert(0, following.layer)

    def _persist_soon(self, meta: SnapshotMeta) -> None:
        if self.persistence is not None and not meta.hidden:
            self.persistence.persist_soon(
                meta, lambda: self._persisted_files(meta), self.snapshots)

    async def _persisted_files(self, meta: SnapshotMeta) -> Mapping[str, Path]:
        """What another node needs to restore the snapshot (waits for its memory image)."""
        files = {SNAPSHOT_META: meta.directory / SNAPSHOT_META}
        if meta.has_memory:
            image = await asyncio.shield(self._materialize(meta))
            files |= {MEMORY: image.memory, DEVICE_STATE: image.device_state}
        return files | {layer_file(layer): self.layers.path(layer) for layer in meta.layers}

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes the snapshot at once (from snapstore in the background); its disk layer stays
        while sandboxes still use it."""
        meta = self.snapshots.find(snapshot_id)
        if meta is not None:
            await self.memory_images.cancelled(meta.directory)
            if self.persistence is not None and not meta.hidden:
                self.persistence.forget_soon(snapshot_id)
        self.snapshots.remove(snapshot_id)
        self.collect_layers()
        log.info("snapshot deleted", extra={"snapshot_id": snapshot_id})

    def collect_layers(self) -> list[str]:
        in_use = self.snapshots.layers_in_use()
        live = {sbx.record.sandbox_id for sbx in self._manager.all()}
        for sandbox_id in list(self._chains):
            if sandbox_id not in live:
                del self._chains[sandbox_id]
        for chain in [*self._chains.values(), *(p.chain for p in self._paused.values())]:
            in_use.update(chain.layers)
        return self.layers.collect(in_use)

    # --- fork / reset --------------------------------------------------------------------------

    async def fork(
        self,
        sandbox_id: str,
        count: int,
        timeout_s: int = 0,
        child_ids: Sequence[str] = (),
        child_tokens: Sequence[str] = (),
    ) -> list[nodeagent_pb2.ForkResult]:
        """One capture of the parent (which then continues), then `count` children restored from
        it on this node. A child that fails gets an error entry; the others live."""
        ids, tokens = _child_identities(count, child_ids, child_tokens)
        parent = self._manager.get(sandbox_id).record
        snapshot = await self.create_snapshot(sandbox_id, hidden=True)
        try:
            outcomes = await asyncio.gather(
                *(self._create_from(snapshot, _child_spec(parent, cid, token, timeout_s))
                  for cid, token in zip(ids, tokens, strict=True)),
                return_exceptions=True,
            )
        finally:
            await self.delete_snapshot(snapshot.snapshot_id)
        return [_fork_result(outcome) for outcome in outcomes]

    async def reset(self, sandbox_id: str, snapshot_id: str) -> cluster_pb2.SandboxRecord:
        """Rewind a running sandbox to one of the snapshots in place: same id, token, network.
        If the restore fails the sandbox is gone (its old state was already discarded)."""
        sandbox = self._manager.get(sandbox_id)
        snapshot = self._check(self.snapshots.get(snapshot_id))
        await self.compacted(sandbox_id)
        async with self._manager.exclusive(sandbox_id):
            timings: dict[str, float] = {}
            try:
                await self._manager.cut_traffic(sandbox_id)
                await timed(timings, "quit", sandbox.vm.shutdown())
                for old in sandbox.directory.glob("*.qcow2"):
                    old.unlink()  # this sandbox's overlays; frozen layers live on in layers/
                _discard_memory(sandbox.directory)  # what it ran on after a resume
                await timed(timings, "overlay", create_overlay(
                    self.layers.path(snapshot.layers[0]), sandbox.directory / _DISK))
                image = _pinned(await self._image(snapshot), sandbox.directory)
                sandbox.vm = await self._restore(
                    sandbox.directory, sandbox.slot, image, sandbox.record, timings)
                # What reached the old VM while it quit waits on nothing.
                await self._manager.cut_traffic(sandbox_id)
            except BaseException:
                await self._discard(sandbox)
                raise
            self._chains[sandbox_id] = Chain(snapshot.template_id, list(snapshot.layers))
        log.info("sandbox reset", extra={"sandbox_id": sandbox_id, "snapshot_id": snapshot_id,
                                         **ms_fields(timings)})
        return sandbox.record

    async def _discard(self, sandbox: Sandbox) -> None:
        """Remove a sandbox whose VM is already gone (a reset that failed half-way)."""
        sandbox_id = sandbox.record.sandbox_id
        await self._manager.detach(sandbox_id)
        await self._network.destroy_slot(sandbox.slot)
        shutil.rmtree(sandbox.directory, ignore_errors=True)
        await self._records.delete_sandbox(sandbox_id)
        self._chains.pop(sandbox_id, None)
        self.collect_layers()

    # --- restore paths -------------------------------------------------------------------------

    async def _create_from(self, snapshot: SnapshotMeta, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        validate_spec(spec)
        self._check(snapshot)
        if self._manager.find(spec.sandbox_id) or spec.sandbox_id in self._paused:
            raise Conflict(f"sandbox \"{spec.sandbox_id}\" already exists")
        template = await self._templates.get(snapshot.template_id)
        directory = self._sandboxes_dir / spec.sandbox_id
        timings: dict[str, float] = {}
        cleanup = Undo()
        try:
            directory.mkdir(parents=True, exist_ok=False)
            cleanup.push(lambda: shutil.rmtree(directory, ignore_errors=True))
            slot, _ = await asyncio.gather(
                timed(timings, "network", self._manager.new_slot(egress_policy(spec.network))),
                timed(timings, "overlay", create_overlay(
                    self.layers.path(snapshot.layers[0]), directory / _DISK)),
            )
            cleanup.push(lambda: self._network.destroy_slot(slot))
            record = self._manager.new_record(spec, template, snapshot.envd_version)
            early = self._early_image(snapshot, directory)
            if early is not None:
                image, state = early
            else:
                image, state = _pinned(await self._image(snapshot), directory), None
            vm = await self._restore(directory, slot, image, record, timings, state=state)
            cleanup.push(vm.shutdown)
            sandbox = Sandbox(record, slot, vm, directory, timings)
            self._chains[spec.sandbox_id] = Chain(snapshot.template_id, list(snapshot.layers))
            await timed(timings, "publish", self._manager.register(sandbox))
        except BaseException:
            self._chains.pop(spec.sandbox_id, None)
            await cleanup.run()
            raise
        log.info("sandbox restored from snapshot",
                 extra={"sandbox_id": spec.sandbox_id, "snapshot_id": snapshot.snapshot_id,
                        **ms_fields(timings)})
        return sandbox

    async def _image(self, snapshot: SnapshotMeta) -> RestoreImage:
        """The snapshot's shared memory image, materialized now if it is not yet."""
        if not snapshot.has_memory:
            return boot_image(self._templates.inputs(snapshot.template_id))
        image = await asyncio.shield(self._materialize(snapshot))
        return RestoreImage(self._templates.inputs(snapshot.template_id), image.memory,
                            image.device_state, snapshot.guest_token)

    def _early_image(
        self, snapshot: SnapshotMeta, directory: Path
    ) -> tuple[RestoreImage, Callable[[], Awaitable[Path]]] | None:
        """While the snapshot's image is still being made from a frozen copy: its memory file
        pinned now (the same inode, complete once the image is), so that a VM can be launched
        on it meanwhile; and how to wait for the image and pin its device state."""
        partial = self.memory_images.building_memory(snapshot.directory)
        if not snapshot.has_memory or partial is None:
            return None
        memory = link_into(partial, directory / BASE_MEMORY)

        async def state() -> Path:
            image = await asyncio.shield(self._materialize(snapshot))
            return link_into(image.device_state, directory / BASE_STATE)

        inputs = self._templates.inputs(snapshot.template_id)
        return RestoreImage(inputs, memory, None, snapshot.guest_token), state

    async def memory_image(self, snapshot_id: str) -> MemoryImage:
        """A snapshot's memory image, waiting for (or starting) its materialization."""
        return await asyncio.shield(self._materialize(self.snapshots.get(snapshot_id)))

    def _materialize(self, snapshot: SnapshotMeta) -> asyncio.Future[MemoryImage]:
        return self.memory_images.ensure(snapshot.state, snapshot.directory)

    def _paused_image(self, paused: Paused) -> asyncio.Future[MemoryImage]:
        return self.memory_images.ensure(paused.directory / _PAUSED_STATE, paused.directory)

    async def _restore(
        self, directory: Path, slot: NetSlot, image: RestoreImage,
        record: cluster_pb2.SandboxRecord, timings: dict[str, float], disk: str = _DISK,
        *, state: Callable[[], Awaitable[Path]] | None = None,
    ) -> QemuVm:
        """Launch, load the state (or cold-boot a memory-less image), wait for envd and give it
        this sandbox's identity. `state`: the image's device state is awaited once QEMU runs
        (its memory is still being written meanwhile)."""
        if image.memory is None or (image.state is None and state is None):
            vm = await timed(timings, "boot", boot_from_disk(image.inputs, directory, slot, disk))
            ready_timeout_s = self._boot_timeout_s
        else:
            vm = await timed(timings, "launch", launch_restore_target(
                image.inputs, directory, image.memory, slot, disk))
            ready_timeout_s = self._ready_timeout_s
        try:
            loaded = image.state
            if loaded is None and state is not None:
                loaded = await timed(timings, "memory_image", state())
            if loaded is not None:
                await timed(timings, "restore", vm.restore(loaded))
            await timed(timings, "envd_ready",
                        self._envd.wait_healthy(slot.ns_ip, ready_timeout_s))
            record.envd_version = await timed(timings, "envd_init", self._envd.init(
                slot.ns_ip, env_vars=record.env_vars, access_token=record.envd_access_token,
                current_token=image.guest_token or None,
                # Many guests woken at once (a fork) share the host's CPUs: as long as /health.
                timeout_s=self._ready_timeout_s,
            ))
        except BaseException:
            await vm.shutdown()
            raise
        return vm

    async def _sync(self, sandbox: Sandbox) -> None:
        await self._envd.sync(sandbox.host, sandbox.record.envd_access_token,
                              timeout_s=self._ready_timeout_s)

    def _check(self, snapshot: SnapshotMeta) -> SnapshotMeta:
        """Refuse a snapshot taken under another accelerator, kernel or template build."""
        inputs = self._templates.inputs(snapshot.template_id)
        if inputs.key() != snapshot.template_key:
            raise Conflict(
                f"snapshot \"{snapshot.snapshot_id}\" was taken with accelerator "
                f"{snapshot.accelerator}, kernel {snapshot.kernel_version} (artifacts "
                f"{snapshot.artifacts_digest[:12]}); this node runs {inputs.accel.accel}, kernel "
                f"{inputs.artifacts.kernel_version} (artifacts {inputs.artifacts.digest[:12]})"
            )
        if not all(self.layers.path(layer).is_file() for layer in snapshot.layers):
            raise Internal(f"snapshot \"{snapshot.snapshot_id}\" is missing disk layers")
        return snapshot

    def _chain(self, sandbox_id: str) -> Chain:
        chain = self._chains.get(sandbox_id)
        if chain is None:
            chain = self._chains[sandbox_id] = Chain(
                self._manager.get(sandbox_id).record.template_id, [])
        return chain

    # --- persistence across node agent restarts ------------------------------------------------

    def _save(self, paused: Paused) -> None:
        write_private_json(paused.directory / PAUSED_MARKER, {
            "record": paused.record.SerializeToString().hex(),
            "template_id": paused.chain.template_id,
            "layers": paused.chain.layers,
            "active": paused.chain.active,
        })

    async def adopt(self, adopted: Sequence[Adopted]) -> None:
        """Take over running sandboxes recovered from an earlier run (call before `load`, which
        collects the disk layers no chain uses). Their disk chains are read from QEMU; one that
        cannot be read is killed."""
        if not adopted:
            return
        templates = {(await self._templates.get(tid)).disk: tid
                     for tid in self._templates.registered()}
        for found in adopted:
            sandbox_id = found.record.sandbox_id
            await self._manager.register(Sandbox(found.record, found.slot, found.vm,
                                                 found.directory))
            try:
                self._chains[sandbox_id] = await self._chain_of(found, templates)
            except AenvError as err:
                log.error("adopted sandbox has an unknown disk chain, killing it",
                          extra={"sandbox_id": sandbox_id, "error": err.message})
                await self._manager.kill(sandbox_id)
                continue
            log.info("running sandbox adopted", extra={"sandbox_id": sandbox_id,
                                                       "pid": found.vm.pid})

    async def _chain_of(self, found: Adopted, templates: Mapping[Path, str]) -> Chain:
        """`templates`: template ids by their disk files."""
        disk = await found.vm.disk_chain(_ROOT_DISK.id)
        files = [disk.top_file, *disk.backing_files]
        template_id = next((templates[f] for f in files if f in templates), None)
        if template_id is None:
            raise Internal(f"disk chain {[str(f) for f in files]} stands on no known template")
        # A pooled VM's first overlay is open by descriptor (/dev/fdset/N): it is disk.qcow2.
        active = disk.top_file.name if disk.top_file.parent == found.directory else _DISK
        layers = [f.stem for f in disk.backing_files if f.parent == self.layers.root]
        added = disk.top_node.removeprefix(_OVERLAY_NODE)
        return Chain(template_id, layers, active, disk.top_node,
                     int(added) if added.isdigit() else 0)

    def load(self) -> list[str]:
        """Paused sandboxes and snapshots left by an earlier run (call before anything else but
        `adopt`).
        Returns the ids of the paused sandboxes found."""
        snapshots = self.snapshots.load()
        for snapshot in snapshots:
            if not snapshot.image_pending:
                discard_interrupted(snapshot.directory)
        self._finish_interrupted_images([s for s in snapshots if s.image_pending])
        for snapshot in snapshots:
            self._persist_soon(snapshot)  # a push cut short by the last stop
        for meta_file in self._sandboxes_dir.glob(f"*/{PAUSED_MARKER}"):
            try:
                paused = _read_paused(meta_file)
            except (OSError, ValueError, KeyError) as err:
                log.error("unreadable paused sandbox", extra={"path": str(meta_file),
                                                              "error": str(err)})
                continue
            discard_interrupted(paused.directory)
            paused.image_id = paused.record.paused_image
            self._paused[paused.record.sandbox_id] = paused
            self._store_soon(paused)  # a push cut short by the last stop
        self.collect_layers()
        return list(self._paused)

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
            self.memory_images.build(meta.directory, self._deferred_image(
                meta, finish_interrupted(meta.directory, copies[meta.snapshot_id]), {}))
        if pending or strays:
            log.warning("finishing memory images an earlier run left", extra={
                "snapshot_ids": [meta.snapshot_id for meta in pending],
                "copies_found": len(needed), "stray_copies_killed": len(strays)})


class _NextLayer(NamedTuple):
    """A capture's new disk layer: its id and file, and the overlay the VM continues on."""

    layer: str
    frozen: Path
    active: str


def _read_paused(marker: Path) -> Paused:
    """A paused sandbox from its `sandbox.json`, living in the marker's directory."""
    data = json.loads(marker.read_text())
    record = cluster_pb2.SandboxRecord.FromString(bytes.fromhex(data["record"]))
    chain = Chain(str(data["template_id"]), [str(x) for x in data["layers"]], str(data["active"]))
    return Paused(record, marker.parent, chain)


def _discard_memory(directory: Path) -> None:
    """Every memory image a sandbox's directory holds: they are of no use any more."""
    discard_image(directory)
    discard_delta(directory)
    (directory / _PAUSED_STATE).unlink(missing_ok=True)


def _pinned(image: RestoreImage, directory: Path) -> RestoreImage:
    """A snapshot's image hard-linked into a sandbox's directory, and mapped from there: the
    sandbox keeps the base of its delta pauses and captures when the snapshot is deleted (a
    fork deletes its own at once)."""
    if image.memory is None or image.state is None:
        return image
    pinned = pin_base(MemoryImage(image.memory, image.state), directory)
    return dataclasses.replace(image, memory=pinned.memory, state=pinned.device_state)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


async def _keep_running(vm: QemuVm) -> None:
    """Let a VM run again after a capture (or a failed one), whatever state it was left in."""
    if await vm.status() != "running":
        await vm.resume()


def _child_identities(
    count: int, ids: Sequence[str], tokens: Sequence[str]
) -> tuple[list[str], list[str]]:
    if not 1 <= count <= MAX_FORK_CHILDREN:
        raise InvalidArgument(f"count must be between 1 and {MAX_FORK_CHILDREN}")
    if (ids and len(ids) != count) or (tokens and len(tokens) != count):
        raise InvalidArgument("child_ids and child_tokens must have one entry per child")
    return (list(ids) or [new_sandbox_id() for _ in range(count)],
            list(tokens) or [new_secret() for _ in range(count)])


def _child_spec(
    parent: cluster_pb2.SandboxRecord, sandbox_id: str, token: str, timeout_s: int
) -> cluster_pb2.SandboxSpec:
    return cluster_pb2.SandboxSpec(
        sandbox_id=sandbox_id, template_id=parent.template_id, envd_access_token=token,
        env_vars=parent.env_vars, metadata=parent.metadata, timeout_seconds=timeout_s,
        network=parent.network, lifecycle=parent.lifecycle, resources=parent.resources,
        # A child is a sandbox of its own: private app ports get a token of their own too.
        traffic_access_token=new_secret() if parent.network.private_traffic else "",
    )


def _fork_result(outcome: Sandbox | BaseException) -> nodeagent_pb2.ForkResult:
    if isinstance(outcome, Sandbox):
        return nodeagent_pb2.ForkResult(sandbox=outcome.record)
    if not isinstance(outcome, Exception):
        raise outcome
    code = outcome.http_status if isinstance(outcome, AenvError) else 500
    message = outcome.message if isinstance(outcome, AenvError) else "internal error"
    if not isinstance(outcome, AenvError):
        log.error("fork child failed", exc_info=outcome)
    return nodeagent_pb2.ForkResult(error=nodeagent_pb2.ForkError(code=code, message=message))
