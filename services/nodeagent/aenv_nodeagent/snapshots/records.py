"""Publishing this node's snapshots to the cluster (`<prefix>/snapshots/<id>`), so the gateway can
list and delete them and the scheduler can place sandboxes created from them on this node.

The node agent is the only writer of its snapshots' records; hidden snapshots (a fork's capture)
are never published."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import SNAPSHOTS
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.volumes.mounts import loaded_mounts

log = logging.getLogger(__name__)


class RecordStore(Protocol):
    """The generic record access of `ClusterStore` that publishing needs."""

    async def put_record(self, kind: str, record_id: str, record: cluster_pb2.SnapshotRecord,
                         ) -> object: ...

    async def delete_record(self, kind: str, record_id: str) -> None: ...

    async def get_record(
        self, kind: str, record_id: str, record_type: type[cluster_pb2.SnapshotRecord]
    ) -> cluster_pb2.SnapshotRecord | None: ...

    async def list_records(
        self, kind: str, record_type: type[cluster_pb2.SnapshotRecord]
    ) -> list[cluster_pb2.SnapshotRecord]: ...


def snapshot_record(
    meta: SnapshotMeta, node_id: str, resources: cluster_pb2.Resources | None = None
) -> cluster_pb2.SnapshotRecord:
    record = cluster_pb2.SnapshotRecord(
        snapshot_id=meta.snapshot_id, node_id=node_id, sandbox_id=meta.sandbox_id,
        template_id=meta.template_id, names=meta.names, has_memory=meta.has_memory,
        resources=resources, persisted=meta.persisted,
        volume_mounts=loaded_mounts(meta.volume_mounts),
    )
    record.created_at.FromNanoseconds(int(meta.created_at * 1e9))
    return record


class SnapshotPublisher:
    def __init__(self, store: RecordStore, node_id: str) -> None:
        self._store = store
        self._node_id = node_id

    async def publish(
        self, meta: SnapshotMeta, resources: cluster_pb2.Resources | None = None
    ) -> None:
        if meta.hidden:
            return
        record = snapshot_record(meta, self._node_id, resources)
        await self._store.put_record(SNAPSHOTS, meta.snapshot_id, record)

    async def mark_persisted(self, meta: SnapshotMeta) -> None:
        """Flag the published record; one not yet published gets the flag when it is."""
        record = await self._store.get_record(SNAPSHOTS, meta.snapshot_id,
                                              cluster_pb2.SnapshotRecord)
        if record is None or record.persisted or record.node_id != self._node_id:
            return
        record.persisted = True
        await self._store.put_record(SNAPSHOTS, meta.snapshot_id, record)
        log.info("snapshot persisted", extra={"snapshot_id": meta.snapshot_id})

    async def withdraw(self, snapshot_id: str) -> None:
        await self._store.delete_record(SNAPSHOTS, snapshot_id)

    async def sync(self, on_disk: Iterable[SnapshotMeta]) -> None:
        """At start: publish what this node holds, withdraw its records of snapshots it lost."""
        held = {meta.snapshot_id: meta for meta in on_disk if not meta.hidden}
        mine = {r.snapshot_id for r in
                await self._store.list_records(SNAPSHOTS, cluster_pb2.SnapshotRecord)
                if r.node_id == self._node_id}
        for snapshot_id in mine - held.keys():
            await self.withdraw(snapshot_id)
        # Records still published keep what only the capture knew (the sandbox's resources).
        for snapshot_id in held.keys() - mine:
            await self.publish(held[snapshot_id])
        log.info("snapshot records synced", extra={"node_id": self._node_id,
                                                   "snapshots": len(held)})
