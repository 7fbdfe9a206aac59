"""The scheduler process as one unit: etcd caches, placement core, leader election, gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc
from prometheus_client import REGISTRY

from aenv.cluster.v1 import cluster_pb2
from aenv.scheduler.v1 import scheduler_pb2_grpc
from aenv_common import errors
from aenv_common.cluster import (
    NODES,
    SANDBOXES,
    SNAPSHOTS,
    TEMPLATES,
    ClusterStore,
    LeaderElection,
    RecordCache,
)
from aenv_common.events import EventLog
from aenv_common.grpc_server import start_grpc_server
from aenv_common.metrics import MetricsEndpoint
from aenv_scheduler.config import SchedulerSettings
from aenv_scheduler.ledger import ReservationLedger
from aenv_scheduler.metrics import SchedulerCollector
from aenv_scheduler.reservations import Reservations
from aenv_scheduler.scheduler import Scheduler
from aenv_scheduler.servicer import SchedulerServicer
from aenv_scheduler.sweeper import sweep_lost_sandboxes

log = logging.getLogger(__name__)

SERVICE_NAME = "aenv.scheduler.v1.SchedulerService"
EXPIRY_TICK_SECONDS = 1.0


class SchedulerServer:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.port = 0
        self.election: LeaderElection | None = None
        self.scheduler: Scheduler | None = None
        self._store: ClusterStore | None = None
        self._caches: list[RecordCache[Any]] = []
        self._server: grpc.aio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._metrics: MetricsEndpoint | None = None
        self._collector: SchedulerCollector | None = None

    async def start(self) -> None:
        s = self.settings
        try:
            self._store = store = await ClusterStore.connect(s.common)
            nodes = RecordCache(store, NODES, cluster_pb2.NodeRecord)
            templates = RecordCache(store, TEMPLATES, cluster_pb2.TemplateRecord)
            sandboxes = RecordCache(store, SANDBOXES, cluster_pb2.SandboxRecord)
            snapshots = RecordCache(store, SNAPSHOTS, cluster_pb2.SnapshotRecord)
            ledger = ReservationLedger(store, s.instance_id)
            self.scheduler = scheduler = Scheduler(
                nodes,
                templates,
                Reservations(s.reservation_ttl_seconds, on_release=ledger.ended),
                cluster_pb2.Resources(vcpus=s.default_vcpus, memory_mib=s.default_memory_mib),
                s.max_queued,
                snapshots,
                ledger,
                s.retry_after_seconds,
                float(s.leader_ttl_seconds),
            )
            nodes.add_listener(scheduler.on_node_change)
            templates.add_listener(scheduler.on_template_change)
            sandboxes.add_listener(scheduler.on_sandbox_change)
            for cache in (nodes, templates, sandboxes, snapshots):
                self._caches.append(cache)
                await cache.start()
            self._ticker = asyncio.create_task(self._expire_reservations(scheduler))
            self.election = LeaderElection(
                store,
                store.keys.scheduler_leader,
                s.instance_id,
                lambda: self._lead(scheduler, ledger, sandboxes),
                ttl=s.leader_ttl_seconds,
            )
            self.election.start()
            servicer = SchedulerServicer(scheduler, s.queue_wait_seconds)
            register = scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server
            self._server, self.port = await start_grpc_server(
                s.listen, [(register, servicer, SERVICE_NAME)]
            )
            await self._serve_metrics(scheduler, self.election)
        except BaseException:
            await self.stop()
            raise
        log.info("scheduler started", extra={"port": self.port, "instance": s.instance_id})

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics is not None else None

    async def _serve_metrics(self, scheduler: Scheduler, election: LeaderElection) -> None:
        if self.settings.metrics_listen is None:
            return
        self._collector = SchedulerCollector(scheduler, lambda: election.is_leader)
        REGISTRY.register(self._collector)
        self._metrics = await MetricsEndpoint.start(self.settings.metrics_listen)

    async def stop(self) -> None:
        if self._metrics is not None:
            await self._metrics.stop()
            self._metrics = None
        if self._collector is not None:
            REGISTRY.unregister(self._collector)
            self._collector = None
        if self._server is not None:
            await self._server.stop(grace=1.0)
            self._server = None
        if self.election is not None:
            await self.election.stop()
            self.election = None
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for cache in self._caches:
            await cache.stop()
        self._caches.clear()
        if self._store is not None:
            await self._store.close()
            self._store = None

    async def _lead(
        self,
        scheduler: Scheduler,
        ledger: ReservationLedger,
        sandboxes: RecordCache[cluster_pb2.SandboxRecord],
    ) -> None:
        """This instance's term as leader: the stored reservations adopted first (placing
        without them could over-place a node), then placements, the sweeper and the ledger's
        cleanup until the term ends."""
        assert self._store is not None
        while True:
            try:
                scheduler.adopt(await ledger.load(), sandboxes.entry)
                break
            except errors.AenvError as err:
                log.warning("reading stored reservations failed", extra={"error": err.message})
                await asyncio.sleep(EXPIRY_TICK_SECONDS)
        scheduler.leading = True
        log.info("placing as leader", extra={"instance": self.settings.instance_id})
        try:
            await asyncio.gather(
                sweep_lost_sandboxes(
                    self._store, self.settings.sweep_interval_seconds,
                    EventLog(self._store, self.settings.common.events_retention_s)),
                ledger.flush_every(EXPIRY_TICK_SECONDS),
            )
        finally:
            scheduler.leading = False

    @staticmethod
    async def _expire_reservations(scheduler: Scheduler) -> None:
        while True:
            await asyncio.sleep(EXPIRY_TICK_SECONDS)
            scheduler.expire_reservations()
