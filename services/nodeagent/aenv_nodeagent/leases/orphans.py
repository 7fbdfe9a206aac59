"""Paused sandboxes whose node is gone, under a lapsed lease: ended by one live node.

A paused sandbox whose state is in snapstore outlives its node (snapshots/paused_claims.py): its
record stays PAUSED, naming a node that is no longer registered, until some node takes it over.
No node agent holds it, so no node's reaper would end it when its lease lapses. The keeper of
such orphans is the live node with the lowest id (each reaper asks at its reconcile; a node
joining or leaving moves the job within one interval), and every change it makes is a
compare-and-swap on the record's revision as it read it: a node taking the sandbox over, its own
node coming back, or a second keeper during a hand-over makes the write fail, never doubles it.

- KILL: the record's delete, the DIED event and its certificate (`LEASE_EXPIRED`, "lease <id>
  lapsed") are one transaction, guarded on the record's revision, then the stored state is
  dropped from snapstore. So no call ever finds the sandbox neither there nor certified, and no
  certificate is written for a sandbox another node took meanwhile (that node's own reaper ends
  it, under the same cause). With events off, only the record is deleted.
- PAUSE: it is paused already; it leaves the lapsed lease as a node's own paused sandboxes do
  (`lease_id` emptied, `lease_on_expiry` cleared), still stored, resumable by its owner.
"""

from __future__ import annotations

import logging

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore, Versioned
from aenv_common.cluster.keys import SANDBOXES
from aenv_common.errors import Conflict
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence

log = logging.getLogger(__name__)

PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
Orphan = Versioned[cluster_pb2.SandboxRecord]


class StoredOrphans:
    def __init__(
        self, store: ClusterStore, node_id: str, events: SandboxEvents,
        persistence: SnapshotPersistence | None,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._events = events
        self._persistence = persistence

    async def leased(self) -> list[Orphan]:
        """The orphans under a lease (lapsed or not: the reaper decides), when this node keeps
        them; none otherwise."""
        live = {node.node_id for node in await self._store.list_nodes()}
        if min(live | {self._node_id}) != self._node_id:
            return []
        _, records = await self._store.snapshot(SANDBOXES, cluster_pb2.SandboxRecord)
        return [entry for entry in records.values() if is_orphan(entry.record, live)]

    async def kill(self, orphan: Orphan, *, cause: cluster_pb2.DeathCause, detail: str) -> None:
        """:raise Conflict: the record changed (taken over, resumed): not this keeper's now."""
        record = orphan.record
        if self._events.enabled:
            ended = await self._events.died_replacing(record, orphan.mod_revision, cause, detail)
        else:
            ended = await self._store.delete_guarded(SANDBOXES, record.sandbox_id,
                                                     orphan.mod_revision)
        if not ended:
            raise Conflict(f'orphaned sandbox "{record.sandbox_id}" changed meanwhile')
        if self._persistence is not None:
            self._persistence.forget_soon(record.paused_image)
        else:
            log.warning("orphaned sandbox's stored state left in snapstore: this node has no "
                        "snapstore", extra={"sandbox_id": record.sandbox_id,
                                            "manifest_id": record.paused_image})
        log.info("orphaned paused sandbox ended", extra={
            "sandbox_id": record.sandbox_id, "from_node": record.node_id, "detail": detail})

    async def detach(self, orphan: Orphan, lease_id: str) -> None:
        """:raise Conflict: the record changed meanwhile."""
        record = cluster_pb2.SandboxRecord()
        record.CopyFrom(orphan.record)
        if record.lease_id != lease_id:
            return
        record.lease_id = ""
        record.ClearField("lease_on_expiry")
        if not await self._store.put_guarded(SANDBOXES, record.sandbox_id, orphan.mod_revision,
                                             (SANDBOXES, record.sandbox_id, record)):
            raise Conflict(f'orphaned sandbox "{record.sandbox_id}" changed meanwhile')


def is_orphan(record: cluster_pb2.SandboxRecord, live_nodes: set[str]) -> bool:
    """Paused, stored in snapstore, under a lease, its node gone."""
    return (record.state == PAUSED and bool(record.paused_image) and bool(record.lease_id)
            and record.node_id not in live_nodes)
