"""Snapshots persisted to snapstore, so any node can restore them (docs/architecture.md, "Persist").

After a snapshot's memory image is materialized (at once for a filesystem-only snapshot), its
`snapshot.json`, `memory`, `device.state` and every frozen disk layer it stands on are pushed as
one manifest, in the background and a few at a time: create_snapshot never waits for it, and
each runs in a child process at a low CPU priority (push_worker.py), yielding to creates. Chunks
the store already has (earlier layers, unchanged memory) are not sent again. A failed push is
retried with backoff and, past that, at the next node agent start; the local copy is never
touched. A node that lacks a snapshot pulls it, points the pulled layers' qcow2 backing files at
its own paths, and restores from it as from a local one.

`snapshot.json` holds the guest's envd token: it travels only inside the stored manifest (like
the local 0600 file) and is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import grpc
from prometheus_client import Counter, Gauge

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import InvalidArgument, NotFound
from aenv_common.snapshots import PushStats, pull_files, snapstore_stub
from aenv_common.snapshots._rpc import typed_rpc_errors
from aenv_common.snapshots.codec import check_name
from aenv_nodeagent.disks import rebase_overlay
from aenv_nodeagent.memory.images import DEVICE_STATE, MEMORY
from aenv_nodeagent.snapshots.push_worker import LOWEST_NICE, push_in_child
from aenv_nodeagent.snapshots.store import (
    SNAPSHOT_META,
    LayerStore,
    SnapshotMeta,
    SnapshotStore,
    read_meta,
)

log = logging.getLogger(__name__)

# The files to push, once they are ready (waits for the memory image).
FilesReady = Callable[[], Awaitable[Mapping[str, Path]]]
OnPersisted = Callable[[SnapshotMeta], Awaitable[None]]
OnPushed = Callable[[], Awaitable[None]]
TemplateDisk = Callable[[str], Awaitable[Path]]

DEFAULT_RETRY_DELAYS_S = (2.0, 10.0, 60.0, 300.0)

PUSH_ATTEMPTS = Counter(
    "aenv_node_snapshot_push_attempts",
    "Attempts to push a snapshot or template to snapstore, by outcome (failed ones are retried)",
    ["outcome"])
# Zero once a fresh node's start-up pushes are done (bench/create_latency.py waits for it).
PUSHES_PENDING = Gauge(
    "aenv_node_snapshot_pushes_pending",
    "Pushes to snapstore not done yet: queued, running or waiting to retry, and built-in "
    "template captures still being checked against the store")


def layer_file(layer_id: str) -> str:
    return f"{layer_id}.qcow2"


class PushState(StrEnum):
    PUSHING = "pushing"
    RETRYING = "retrying"  # an attempt failed (the store or its S3 down): the next one waits
    PUSHED = "pushed"
    FAILED = "failed"  # every attempt failed: retried at the next node agent start


@dataclass
class PushStatus:
    """Where a manifest's push stands. Until it is PUSHED the store holds no manifest of it:
    the manifest is written last, over chunks already stored."""

    state: PushState = PushState.PUSHING
    attempts: int = 0
    last_error: str = ""


class SnapshotPersistence:
    def __init__(
        self, address: str, *, max_pushes: int = 2,
        retry_delays_s: Sequence[float] = DEFAULT_RETRY_DELAYS_S,
        on_persisted: OnPersisted | None = None, push_nice: int = LOWEST_NICE,
    ) -> None:
        self._address = address
        self._push_nice = push_nice
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = snapstore_stub(self._channel)
        self._slots = asyncio.Semaphore(max_pushes)
        self._retry_delays_s = tuple(retry_delays_s)
        self._pushes: dict[str, asyncio.Task[None]] = {}
        self._pulls: dict[str, asyncio.Task[SnapshotMeta | None]] = {}
        self._deletes: set[asyncio.Task[None]] = set()
        # Records "persisted" in the snapshot's cluster record.
        self._on_persisted = on_persisted
        # The last push of each snapshot (tests and benchmarks read them).
        self.stats: dict[str, PushStats] = {}
        # Each manifest's push since this node agent started.
        self.status: dict[str, PushStatus] = {}

    # --- push ----------------------------------------------------------------------------------

    def persist_soon(self, meta: SnapshotMeta, files: FilesReady, store: SnapshotStore) -> None:
        if meta.hidden or meta.persisted:
            return

        async def pushed() -> None:
            meta.persisted = True
            store.save(meta)
            if self._on_persisted is not None:
                await self._on_persisted(meta)

        self.push_soon(meta.snapshot_id, files, pushed, labels={
            "template_id": meta.template_id, "sandbox_id": meta.sandbox_id})

    def push_soon(
        self, manifest_id: str, files: FilesReady, on_pushed: OnPushed,
        labels: Mapping[str, str],
    ) -> None:
        """Push `files` as manifest `manifest_id` in the background (retried with backoff), then
        call `on_pushed`. A push of the same manifest already in flight is kept."""
        if manifest_id in self._pushes:
            return
        self.status[manifest_id] = PushStatus()
        task = asyncio.ensure_future(self._push_retried(manifest_id, files, on_pushed, labels))
        self._pushes[manifest_id] = task
        PUSHES_PENDING.inc()
        task.add_done_callback(lambda _: self._pushes.pop(manifest_id, None))
        task.add_done_callback(lambda _: PUSHES_PENDING.dec())

    async def manifests(self) -> set[str]:
        """The ids of every manifest the store holds."""
        with typed_rpc_errors():
            listed = await self._stub.ListManifests(pb.ListManifestsRequest())
        return set(listed.snapshot_ids)

    async def labels(self, manifest_id: str) -> dict[str, str]:
        """A stored manifest's labels (NotFound when the store has no such manifest)."""
        with typed_rpc_errors():
            reply = await self._stub.GetManifest(pb.GetManifestRequest(snapshot_id=manifest_id))
        return dict(reply.manifest.labels)

    async def persisted(self, manifest_id: str) -> None:
        """Wait for the manifest's push in flight, if any."""
        if task := self._pushes.get(manifest_id):
            await asyncio.shield(task)

    async def _push_retried(
        self, manifest_id: str, files: FilesReady, on_pushed: OnPushed,
        labels: Mapping[str, str],
    ) -> None:
        status = self.status[manifest_id]
        for attempt, delay in enumerate((0.0, *self._retry_delays_s)):
            await asyncio.sleep(delay)
            status.attempts = attempt + 1
            try:
                await self._push(manifest_id, await files(), labels)
            except Exception as err:  # the store or the image may come back: try again later
                status.state, status.last_error = PushState.RETRYING, str(err)
                PUSH_ATTEMPTS.labels("failed").inc()
                log.warning("push to snapstore failed", extra={
                    "manifest_id": manifest_id, "attempt": attempt + 1, "error": str(err)})
                continue
            status.state = PushState.PUSHED
            PUSH_ATTEMPTS.labels("ok").inc()
            await on_pushed()
            return
        status.state = PushState.FAILED
        log.error("not pushed to snapstore; kept locally, retried at the next start",
                  extra={"manifest_id": manifest_id})

    async def _push(
        self, manifest_id: str, files: Mapping[str, Path], labels: Mapping[str, str]
    ) -> None:
        async with self._slots:
            stats = await push_in_child(self._address, manifest_id, files, labels,
                                        self._push_nice)
        self.stats[manifest_id] = stats

    # --- delete --------------------------------------------------------------------------------

    def forget_soon(self, manifest_id: str) -> None:
        """Stop the manifest's push and delete it from the store, in the background."""
        task = asyncio.ensure_future(self._forget(manifest_id, self._pushes.pop(manifest_id, None)))
        self._deletes.add(task)
        task.add_done_callback(self._deletes.discard)

    async def _forget(self, manifest_id: str, push: asyncio.Task[None] | None) -> None:
        if push is not None:  # its manifest must not land after the delete
            push.cancel()
            await asyncio.gather(push, return_exceptions=True)
        try:
            with typed_rpc_errors():
                await self._stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id=manifest_id))
        except NotFound:
            return  # never persisted
        except Exception as err:
            # Unreferenced by any node: only the store's space is lost until an operator acts.
            log.warning("manifest not deleted from snapstore",
                        extra={"manifest_id": manifest_id, "error": str(err)})
            return
        log.info("manifest deleted from snapstore", extra={"manifest_id": manifest_id})

    # --- pull ----------------------------------------------------------------------------------

    async def fetch(
        self, snapshot_id: str, snapshots: SnapshotStore, layers: LayerStore,
        template_disk: TemplateDisk,
    ) -> SnapshotMeta | None:
        """The snapshot pulled from the store into this node's stores; None if it has none.
        Concurrent restores of the same snapshot share one pull."""
        try:
            check_name("snapshot id", snapshot_id)
        except InvalidArgument:
            return None  # a name the store cannot hold: not a persisted snapshot
        task = self._pulls.get(snapshot_id)
        if task is None:
            task = asyncio.ensure_future(
                self._pull(snapshot_id, snapshots, layers, template_disk))
            self._pulls[snapshot_id] = task
            task.add_done_callback(lambda _: self._pulls.pop(snapshot_id, None))
        return await asyncio.shield(task)

    async def _pull(
        self, snapshot_id: str, snapshots: SnapshotStore, layers: LayerStore,
        template_disk: TemplateDisk,
    ) -> SnapshotMeta | None:
        staging = snapshots.staging_directory(snapshot_id)
        try:
            try:
                files = await self.pull(snapshot_id, staging)
            except NotFound:
                return None
            return await _adopt(files, snapshots, layers, template_disk)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    async def pull(self, manifest_id: str, dest: Path) -> dict[str, Path]:
        """The manifest's files, pulled into `dest` (NotFound when the store has none)."""
        return await pull_files(self._stub, manifest_id, dest)

    async def close(self) -> None:
        """Stop pushes and pulls (a push left undone resumes at the next start), finish
        deletes."""
        for task in [*self._pushes.values(), *self._pulls.values()]:
            task.cancel()
        await asyncio.gather(*self._pushes.values(), *self._pulls.values(), *self._deletes,
                             return_exceptions=True)
        await self._channel.close()


async def _adopt(
    files: Mapping[str, Path], snapshots: SnapshotStore, layers: LayerStore,
    template_disk: TemplateDisk,
) -> SnapshotMeta:
    """Move pulled files into place: memory files into a snapshot directory, layers (re-pointed
    at this node's paths) into `layers/`. A layer this node already holds is kept as is."""
    staging = files[SNAPSHOT_META].parent
    meta = read_meta(files[SNAPSHOT_META], staging)
    await rebase_pulled(files, meta.layers, layers, await template_disk(meta.template_id))
    meta.directory = snapshots.new_directory(meta.snapshot_id)
    for name in (MEMORY, DEVICE_STATE):
        if name in files:
            os.replace(files[name], meta.directory / name)
    meta.persisted = True
    snapshots.add(meta)  # before the layers: from now on they count as in use
    place_layers(files, meta.layers, layers)
    log.info("snapshot pulled from snapstore",
             extra={"snapshot_id": meta.snapshot_id, "layers": len(meta.layers)})
    return meta


async def rebase_pulled(
    files: Mapping[str, Path], chain: Sequence[str], layers: LayerStore, template_disk: Path,
    top: Path | None = None,
) -> None:
    """Point pulled qcow2 files at this node's paths (they name the pushing node's): each layer
    of `chain` (newest first) at the next one's place in `layers/`, the last at the template's
    disk, and `top` (an overlay over the chain) at the first."""
    below = [(layers.path(layer), "qcow2") for layer in chain] + [(template_disk, "")]
    stack = [files[layer_file(layer)] for layer in chain]
    if top is None:
        below = below[1:]
    else:
        stack.insert(0, top)
    for image, (backing, backing_format) in zip(stack, below, strict=True):
        await rebase_overlay(image, backing, backing_format)


def place_layers(files: Mapping[str, Path], chain: Sequence[str], layers: LayerStore) -> None:
    """Move pulled layers into `layers/`; one this node already holds is kept as is (and the
    pulled copy dropped)."""
    for layer in chain:
        if layers.path(layer).is_file():
            files[layer_file(layer)].unlink(missing_ok=True)
        else:
            os.replace(files[layer_file(layer)], layers.path(layer))
