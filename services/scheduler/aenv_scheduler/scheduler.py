"""The placement core: resolves the template and resources of a spec, reserves a node for it,
or queues it until capacity appears. Reads nodes and templates from watched caches only."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from aenv.cluster.v1 import cluster_pb2
from aenv.scheduler.v1 import scheduler_pb2
from aenv_common import errors
from aenv_common.cluster import RecordCache, Versioned
from aenv_scheduler.admission import AdmissionQueue
from aenv_scheduler.ledger import NotLeader, ReservationLedger, StoredReservation
from aenv_scheduler.placement import choose_node, fits_when_empty, resolve_demand
from aenv_scheduler.reservations import Reservations

log = logging.getLogger(__name__)

NodeRecord = cluster_pb2.NodeRecord
TemplateRecord = cluster_pb2.TemplateRecord
SandboxRecord = cluster_pb2.SandboxRecord
SnapshotRecord = cluster_pb2.SnapshotRecord
Placement = scheduler_pb2.Placement


class Scheduler:
    def __init__(
        self,
        nodes: RecordCache[NodeRecord],
        templates: RecordCache[TemplateRecord],
        reservations: Reservations,
        fallback: cluster_pb2.Resources,
        max_queued: int,
        snapshots: RecordCache[SnapshotRecord] | None = None,
        ledger: ReservationLedger | None = None,
        retry_after_s: float = 5.0,
        standby_retry_s: float = 1.0,
    ) -> None:
        self._nodes = nodes
        # None: a lone scheduler that always leads and keeps its reservations in memory only.
        self._ledger = ledger
        # Set while this instance holds the leader key and has adopted the stored reservations.
        self.leading = ledger is None
        # What a standby's refusal says: a leader may be elected by then (at most a lease TTL).
        self._standby_retry_s = standby_retry_s
        self._templates = templates
        self._snapshots = snapshots
        self._reservations = reservations
        self._fallback = fallback
        self.queue: AdmissionQueue[cluster_pb2.SandboxSpec, Placement] = AdmissionQueue(
            self._try_place, max_queued, retry_after_s
        )
        self.placed = 0

    @property
    def reservations(self) -> Reservations:
        return self._reservations

    def live_nodes(self) -> list[NodeRecord]:
        return self._nodes.values()

    def snapshot(self, snapshot_id: str) -> SnapshotRecord | None:
        return self._snapshots.get(snapshot_id) if self._snapshots is not None else None

    async def schedule(self, spec: cluster_pb2.SandboxSpec, wait_seconds: float) -> Placement:
        if not spec.template_id:
            raise errors.InvalidArgument("template_id is required")
        if not self.leading:
            raise NotLeader(
                "this scheduler is a standby; another replica places", self._standby_retry_s
            )
        if not spec.sandbox_id:  # the reservation's key
            named = cluster_pb2.SandboxSpec()
            named.CopyFrom(spec)
            named.sandbox_id = uuid.uuid4().hex
            spec = named
        placement: Placement = await self.queue.admit(spec, wait_seconds)
        if self._ledger is not None:
            await self._record(spec.sandbox_id)
        return placement

    async def _record(self, sandbox_id: str) -> None:
        """Writes the placement's reservation to etcd while this instance leads; a deposed
        leader's placement is dropped (the caller asks another replica)."""
        assert self._ledger is not None
        reservation = self._reservations.get(sandbox_id)
        if reservation is None:  # ended already (its node left meanwhile)
            raise errors.Unavailable("the chosen node left; schedule again")
        try:
            await self._ledger.record(reservation, self._reservations.ttl_seconds)
        except errors.AenvError:
            self._reservations.release(sandbox_id)
            self.queue.retry_waiting()
            raise

    def adopt(
        self,
        stored: list[tuple[StoredReservation, float]],
        sandbox_entry: Callable[[str], Versioned[SandboxRecord] | None],
    ) -> None:
        """Takes over the reservations a previous leader stored (with the seconds left of
        each): those its nodes accounted for meanwhile end at once."""
        for reservation, ttl_left in stored:
            sandbox_id = reservation.sandbox_id
            self._reservations.add(reservation.node_id, sandbox_id, reservation.resources, ttl_left)
            if (entry := sandbox_entry(sandbox_id)) is not None:
                self._reservations.sandbox_recorded(sandbox_id, entry.mod_revision)
        for node_id in {reservation.node_id for reservation, _ in stored}:
            node = self._nodes.entry(node_id)
            if node is None:
                self._reservations.node_gone(node_id)
            else:
                self._reservations.node_updated(node_id, node.mod_revision)
        log.info("reservations adopted", extra={"count": len(stored)})
        self.queue.retry_waiting()

    # Cache listeners: capacity may have changed, so waiting requests are retried.

    def on_node_change(self, node_id: str, entry: Versioned[NodeRecord] | None) -> None:
        if entry is None:
            self._reservations.node_gone(node_id)
        else:
            self._reservations.node_updated(node_id, entry.mod_revision)
        self.queue.retry_waiting()

    def on_sandbox_change(self, sandbox_id: str, entry: Versioned[SandboxRecord] | None) -> None:
        if entry is not None:
            self._reservations.sandbox_recorded(sandbox_id, entry.mod_revision)

    def on_template_change(self, template_id: str, entry: Versioned[TemplateRecord] | None) -> None:
        self.queue.retry_waiting()

    def expire_reservations(self) -> None:
        if self._reservations.expire():
            self.queue.retry_waiting()

    # Placement ----------------------------------------------------------------------------

    def _try_place(self, spec: cluster_pb2.SandboxSpec) -> Placement | None:
        template_id, default, nodes = self._candidates(spec.template_id)
        need = resolve_demand(spec.resources, default, self._fallback)
        node = choose_node(nodes, need, template_id, self._reservations.held)
        if node is None:
            if not any(fits_when_empty(n, need) for n in nodes):
                raise errors.ResourceExhausted(
                    f"no node can ever hold {need.vcpus} vCPU / {need.memory_mib} MiB"
                    if nodes
                    else "no node is registered"
                )
            return None
        self._reservations.add(node.node_id, spec.sandbox_id, need)
        self.placed += 1
        return Placement(
            node_id=node.node_id,
            nodeagent_address=node.nodeagent_address,
            proxy_address=node.proxy_address,
        )

    def _candidates(self, name: str) -> tuple[str, cluster_pb2.Resources | None, list[NodeRecord]]:
        """The template to place by, its default resources, and the nodes that may take it:
        a snapshot goes to the node holding its files; once that node is gone, to any node if
        the snapshot is in snapstore (the chosen node pulls it)."""
        snapshot = self.snapshot(name)
        if snapshot is None:
            template_id, template = self._resolve_template(name)
            default = template.default_resources if template is not None else None
            return template_id, default, self._nodes.values()
        default = snapshot.resources if snapshot.HasField("resources") else None
        if default is None and (template := self._templates.get(snapshot.template_id)):
            default = template.default_resources
        if holder := self._nodes.get(snapshot.node_id):
            return snapshot.template_id, default, [holder]
        if snapshot.persisted:
            return snapshot.template_id, default, self._nodes.values()
        raise errors.Unavailable(
            f"node '{snapshot.node_id}' holding snapshot '{name}' is not available, and the "
            "snapshot is not (yet) in snapstore"
        )

    def _resolve_template(self, name: str) -> tuple[str, TemplateRecord | None]:
        """The template's canonical id and record (by id, then alias). A template only known
        from a node's cache is accepted without a record."""
        template = self._templates.get(name)
        if template is not None:
            return name, template
        for candidate in self._templates.values():
            if name in candidate.aliases:
                return candidate.template_id, candidate
        if any(name in node.cached_templates for node in self._nodes.values()):
            return name, None
        raise errors.NotFound(f"template '{name}' not found")
