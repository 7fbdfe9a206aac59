"""Snapshot operations, shared by the REST and gRPC edges.

A snapshot's files live on the node that captured it; that node agent publishes its record in
etcd and is the one asked to delete it. Creating a sandbox from a snapshot is a plain create with
the snapshot id as template (the scheduler places it on the holding node)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound, Unavailable
from aenv_gateway.clients import NodeAgentClients
from aenv_gateway.directory import SandboxDirectory
from aenv_gateway.paging import OrderKey, paginate
from aenv_gateway.service import SandboxService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SnapshotQuery:
    sandbox_id: str | None = None
    name: str | None = None
    limit: int | None = None
    cursor: str | None = None


@dataclass(frozen=True)
class SnapshotPage:
    items: list[cluster_pb2.SnapshotRecord]
    next_cursor: str | None


class SnapshotService:
    def __init__(
        self, sandboxes: SandboxService, directory: SandboxDirectory, nodeagents: NodeAgentClients
    ) -> None:
        self._sandboxes = sandboxes
        self._directory = directory
        self._nodeagents = nodeagents

    async def create(
        self, sandbox_id: str, name: str, keep_memory: bool = True
    ) -> cluster_pb2.SnapshotRecord:
        """Captures a running sandbox (which keeps running); without memory only its disk."""
        located = self._sandboxes.running(sandbox_id)
        info = await self._nodeagents.create_snapshot(
            located.owner.nodeagent_address, sandbox_id, name, keep_memory
        )
        record = cluster_pb2.SnapshotRecord(
            snapshot_id=info.snapshot_id, node_id=located.owner.node_id, sandbox_id=sandbox_id,
            template_id=info.template_id, names=[info.name or info.snapshot_id],
            has_memory=info.has_memory, created_at=info.created_at,
            resources=located.record.resources,
        )
        self._directory.remember_snapshot(record)
        log.info("snapshot created",
                 extra={"sandbox_id": sandbox_id, "snapshot_id": record.snapshot_id})
        return record

    def list(self, query: SnapshotQuery) -> SnapshotPage:
        """Newest first, filtered by source sandbox and name."""
        matching = [r for r in self._directory.snapshots() if _matches(r, query)]
        items, next_cursor = paginate(
            matching, _order_key, newest_first=True, limit=query.limit, cursor=query.cursor
        )
        return SnapshotPage(items, next_cursor)

    async def delete(self, snapshot_id: str) -> None:
        record = self._directory.snapshot(snapshot_id)
        if record is None:
            raise NotFound(f'snapshot "{snapshot_id}" not found')
        owner = self._directory.owner_of(record.node_id)
        if owner is None:
            raise Unavailable(f'node "{record.node_id}" holding snapshot "{snapshot_id}" is down')
        try:
            await self._nodeagents.delete_snapshot(owner.nodeagent_address, snapshot_id)
        finally:
            # Also on NotFound: the holder no longer has it, whatever the mirror still says.
            self._directory.forget_snapshot(snapshot_id)
        log.info("snapshot deleted", extra={"snapshot_id": snapshot_id})


def _matches(record: cluster_pb2.SnapshotRecord, query: SnapshotQuery) -> bool:
    if query.sandbox_id and record.sandbox_id != query.sandbox_id:
        return False
    return not query.name or query.name in record.names or query.name == record.snapshot_id


def _order_key(record: cluster_pb2.SnapshotRecord) -> OrderKey:
    return (record.created_at.ToNanoseconds(), record.snapshot_id)
