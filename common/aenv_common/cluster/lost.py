"""Sandboxes of dead nodes are reported lost, never dropped silently (docs/architecture.md,
"Cluster state")."""

from __future__ import annotations

import logging
from collections.abc import Collection

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster.store import ClusterStore

log = logging.getLogger(__name__)

LOST = cluster_pb2.SANDBOX_STATE_LOST
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED


async def mark_lost_sandboxes(store: ClusterStore, live_node_ids: Collection[str]) -> list[str]:
    """Marks SANDBOX_STATE_LOST every sandbox whose owner is not among `live_node_ids` (the nodes
    whose lease-bound record exists), but paused ones whose state is in snapstore. Returns the ids
    it marked. Run by the scheduler leader."""
    marked: list[str] = []
    for record in await store.list_sandboxes():
        if not _losable(record, live_node_ids):
            continue
        if await _mark_lost(store, record.sandbox_id, live_node_ids):
            marked.append(record.sandbox_id)
    return marked


def _losable(record: cluster_pb2.SandboxRecord, live_node_ids: Collection[str]) -> bool:
    """Its node is gone, and it is not a paused sandbox kept in snapstore (another node can take
    that one over)."""
    if record.state == LOST or record.node_id in live_node_ids:
        return False
    return not (record.state == PAUSED and record.paused_image)


async def _mark_lost(store: ClusterStore, sandbox_id: str, live_node_ids: Collection[str]) -> bool:
    changed = False

    def mutate(record: cluster_pb2.SandboxRecord) -> None:
        # Re-checked on the fresh copy: the owner may have rewritten the record meanwhile.
        nonlocal changed
        changed = _losable(record, live_node_ids)
        if changed:
            record.state = LOST

    try:
        await store.update_sandbox(sandbox_id, mutate)
    except errors.NotFound:
        return False  # deleted meanwhile: nothing to report
    if changed:
        log.warning("sandbox lost with its node", extra={"sandbox_id": sandbox_id})
    return changed
