"""Delivery of every webhook of the cluster, by one gateway at a time.

Each gateway campaigns for `<prefix>/webhook-deliverer/leader` (aenv_common.cluster.
LeaderElection); the one that holds it mirrors `webhooks/` (a RecordCache) and runs one Worker
per enabled webhook, so one receiver that fails or hangs delays only its own webhook's events.
Workers start and stop as webhooks are created, enabled, disabled and deleted. When the leader
loses its lease (or stops), its workers are cancelled mid-attempt; the standby that wins next
starts every worker again from the cursors in the records, so what was not acknowledged is sent
again (worker.py).

The leader key lies outside `webhooks/`, where every key is one webhook's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.cache import RecordCache
from aenv_common.cluster.leader import LeaderElection
from aenv_common.cluster.store import Versioned, lease_gone
from aenv_common.errors import Internal, NotFound
from aenv_common.events import EventLog
from aenv_common.secrets.sealing import SecretsKey
from aenv_gateway.core.webhooks.feed import EtcdEventFeed
from aenv_gateway.core.webhooks.records import WEBHOOKS, EtcdWebhookRecords
from aenv_gateway.core.webhooks.registry import open_secret
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Sender
from aenv_gateway.core.webhooks.worker import Worker

log = logging.getLogger(__name__)

LEADER_KEY = "webhook-deliverer/leader"
LEADER_TTL_S = 5

T = TypeVar("T")


class EtcdJournal:
    """Cursors in the webhooks' records, the delivery log on the events' retention lease."""

    def __init__(self, store: ClusterStore, records: EtcdWebhookRecords, events: EventLog) -> None:
        self._store = store
        self._records = records
        self._events = events

    async def advance(self, webhook_id: str, cursor: str) -> bool:
        def move(record: WebhookRecord) -> None:
            record.cursor_event_id = cursor

        try:
            await self._store.update_record(WEBHOOKS, webhook_id, WebhookRecord, move)
        except NotFound:
            return False
        return True

    async def log(self, delivery: WebhookDelivery) -> None:
        await self._on_retention_lease(
            lambda lease: self._records.put_delivery(delivery, lease))

    async def settle(
        self, seen: Versioned[WebhookRecord], cursor: str, delivery: WebhookDelivery | None,
    ) -> Versioned[WebhookRecord] | None:
        record = WebhookRecord()
        record.CopyFrom(seen.record)
        record.cursor_event_id = cursor
        revision = await self._on_retention_lease(
            lambda lease: self._records.settle(record, seen.mod_revision, delivery, lease))
        if revision is None:
            return None
        return Versioned(record, revision, seen.create_revision, seen.lease)

    async def _on_retention_lease(self, write: Callable[[int], Awaitable[T]]) -> T:
        try:
            return await write(await self._events.retention_lease())
        except Internal as err:
            if not lease_gone(err):
                raise
            # Revoked or expired early (etcd restored): once more on a new one.
            return await write(await self._events.retention_lease(replace=True))


class WebhookDeliverer:
    def __init__(
        self, store: ClusterStore, events: EventLog, key: SecretsKey, sender: Sender,
        policy: RetryPolicy, identity: str | None = None, ttl_s: int = LEADER_TTL_S,
    ) -> None:
        self._store = store
        self._key = key
        self._sender = sender
        self._policy = policy
        self._feed = EtcdEventFeed(events)
        self._journal = EtcdJournal(store, EtcdWebhookRecords(store), events)
        self.identity = identity or (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self._election = LeaderElection(
            store, f"{store.keys.prefix}/{LEADER_KEY}".encode(), self.identity, self._lead,
            ttl_s)
        self._workers: dict[str, asyncio.Task[None]] = {}

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    @property
    def delivering(self) -> set[str]:
        """The webhooks this deliverer runs a worker for (none unless it leads)."""
        return {webhook_id for webhook_id, task in self._workers.items() if not task.done()}

    def start(self) -> None:
        self._election.start()

    async def stop(self) -> None:
        """Steps down (a standby takes over at once) and closes the sender."""
        await self._election.stop()
        await self._sender.close()

    async def _lead(self) -> None:
        cache: RecordCache[WebhookRecord] = RecordCache(self._store, WEBHOOKS, WebhookRecord)
        changed = asyncio.Event()
        cache.add_listener(lambda _id, _entry: changed.set())
        await cache.start()
        log.info("delivering webhooks", extra={"identity": self.identity})
        try:
            while True:
                changed.clear()
                self._reconcile(cache)
                await changed.wait()
        finally:
            workers, self._workers = list(self._workers.values()), {}
            for task in workers:
                task.cancel()
            for task in workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await cache.stop()
            log.info("stopped delivering webhooks", extra={"identity": self.identity})

    def _reconcile(self, cache: RecordCache[WebhookRecord]) -> None:
        """One worker per enabled webhook: started for new ones, cancelled for gone ones."""
        for webhook_id, task in list(self._workers.items()):
            record = cache.get(webhook_id)
            if task.done() or record is None or not record.enabled:
                task.cancel()
                del self._workers[webhook_id]
        for record in cache.values():
            if record.enabled and record.webhook_id not in self._workers:
                self._workers[record.webhook_id] = asyncio.create_task(
                    self._worker(cache, record.webhook_id).run(),
                    name=f"webhook-{record.webhook_id}")

    def _worker(self, cache: RecordCache[WebhookRecord], webhook_id: str) -> Worker:
        def current() -> Versioned[WebhookRecord] | None:
            return cache.entry(webhook_id)

        async def fresh() -> Versioned[WebhookRecord] | None:
            return await self._store.get_versioned(WEBHOOKS, webhook_id, WebhookRecord)

        def secret(record: WebhookRecord) -> str:
            return open_secret(self._key, record)

        return Worker(webhook_id, current, fresh, self._feed, self._sender.send, self._journal,
                      self._policy, secret)
