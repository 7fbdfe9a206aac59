"""Sandboxes of dead nodes are reported lost, never dropped silently (docs/architecture.md,
"Cluster state", "Events and death certificates"): the record is marked lost with its death
(cause NODE_LOST) in one update, then the certificate and the LOST event are recorded. A
certificate etcd did not take is kept and written on the next pass."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster.keys import NODES, SANDBOXES
from aenv_common.cluster.store import ClusterStore

if TYPE_CHECKING:  # (events/log.py imports the cluster package: no cycle at run time)
    from aenv_common.events.log import EventLog

log = logging.getLogger(__name__)

LOST = cluster_pb2.SANDBOX_STATE_LOST
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
NODE_LOST = cluster_pb2.DEATH_CAUSE_NODE_LOST


class LostSandboxes:
    """The scheduler leader's sweep of the sandboxes whose node is gone.

    :param events: where their certificates and LOST events go (None: only the records change).
    """

    def __init__(self, store: ClusterStore, events: EventLog | None = None) -> None:
        self._store = store
        self._events = events
        # Marked lost, certificate not recorded yet: by sandbox id.
        self._unrecorded: dict[
            str, tuple[cluster_pb2.DeathCertificate, cluster_pb2.SandboxEvent]] = {}

    async def sweep(self, live_node_ids: Collection[str]) -> list[str]:
        """Marks SANDBOX_STATE_LOST every sandbox whose owner is not among `live_node_ids`
        (the nodes whose lease-bound record exists), but paused ones whose state is in
        snapstore. Returns the ids it marked.

        :raise Unavailable, Internal: etcd failed; what was marked stays marked.
        """
        await self._record_unrecorded()
        marked: list[str] = []
        for record in await self._store.list_sandboxes():
            if not _losable(record, live_node_ids):
                continue
            if await self._mark_lost(record.sandbox_id, record.node_id, live_node_ids):
                marked.append(record.sandbox_id)
        return marked

    async def _mark_lost(
        self, sandbox_id: str, node_id: str, live_node_ids: Collection[str]
    ) -> bool:
        """Marked in one transaction with the absence of its node's record: a node that
        registered again since `live_node_ids` was read (and rewrote its sandbox's record)
        keeps it."""
        found: cluster_pb2.SandboxEvent | None = None

        def mutate(record: cluster_pb2.SandboxRecord) -> None:
            # Re-checked on the fresh copy: the owner may have rewritten the record meanwhile.
            nonlocal found
            found = None
            if record.node_id == node_id and _losable(record, live_node_ids):
                found = self._lost_event(record)
                record.state = LOST
                record.death.CopyFrom(_certificate(found))

        try:
            await self._store.update_record(SANDBOXES, sandbox_id, cluster_pb2.SandboxRecord,
                                            mutate, unless=(NODES, node_id))
        except errors.NotFound:
            return False  # deleted meanwhile: nothing to report
        except errors.Conflict:
            return False  # its node is back (or the record kept changing): not lost
        if found is None:
            return False
        log.warning("sandbox lost with its node", extra={
            "sandbox_id": sandbox_id, "node_id": found.node_id})
        if self._events is not None:
            self._unrecorded[sandbox_id] = (_certificate(found), found)
            await self._record_unrecorded()
        return True

    def _lost_event(self, record: cluster_pb2.SandboxRecord) -> cluster_pb2.SandboxEvent:
        event = cluster_pb2.SandboxEvent(
            sandbox_id=record.sandbox_id, type=cluster_pb2.SANDBOX_EVENT_TYPE_LOST,
            node_id=record.node_id,
            template_id=record.catalog_template_id or record.template_id,
            metadata=dict(record.metadata), owner_key_id=record.owner_key_id,
            lease_id=record.lease_id, cause=NODE_LOST,
            detail=f"lost with its node {record.node_id}, which stopped answering")
        return event if self._events is None else self._events.stamp(event)

    async def _record_unrecorded(self) -> None:
        if self._events is None:
            return
        for sandbox_id, (certificate, event) in list(self._unrecorded.items()):
            try:
                await self._events.certify(certificate, event)
            except errors.AenvError as err:  # the next pass tries again
                log.warning("lost sandbox's certificate not recorded yet",
                            extra={"sandbox_id": sandbox_id, "error": err.message})
                return
            del self._unrecorded[sandbox_id]


async def mark_lost_sandboxes(
    store: ClusterStore, live_node_ids: Collection[str], events: EventLog | None = None
) -> list[str]:
    """One sweep (LostSandboxes.sweep) by a sweeper that keeps nothing between passes."""
    return await LostSandboxes(store, events).sweep(live_node_ids)


def _losable(record: cluster_pb2.SandboxRecord, live_node_ids: Collection[str]) -> bool:
    """Its node is gone, and it is not a paused sandbox kept in snapstore (another node can take
    that one over)."""
    if record.state == LOST or record.node_id in live_node_ids:
        return False
    return not (record.state == PAUSED and record.paused_image)


def _certificate(event: cluster_pb2.SandboxEvent) -> cluster_pb2.DeathCertificate:
    certificate = cluster_pb2.DeathCertificate(
        sandbox_id=event.sandbox_id, cause=event.cause, detail=event.detail,
        node_id=event.node_id, owner_key_id=event.owner_key_id, metadata=dict(event.metadata),
        template_id=event.template_id, event_id=event.event_id)
    if event.HasField("time"):
        certificate.time.CopyFrom(event.time)
    return certificate
