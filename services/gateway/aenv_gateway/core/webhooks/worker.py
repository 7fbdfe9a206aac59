"""One webhook's deliveries: its events in commit order, each delivered (or given up on) before
the next, its cursor advanced only then.

That order is what makes delivery at least once: the cursor (in the webhook's record) moves past
an event only after the receiver answered 2xx or the retries ran out, so whatever stops the
worker — its gateway losing the leadership, a crash, etcd going away — the next one starts from
the cursor and sends again what was not acknowledged. A receiver may thus see an event twice
(the event's `id` tells it), never miss one still retained. Events the webhook did not subscribe
to move the cursor too, written at most once a second (replaying them costs nothing).

Before an event's first attempt the worker knows its webhook's record as it stood when the event
was committed or later: from a linearizable read, or — when the event was committed before the
worker's own last write of the record (a burst) — from that write, which no other writer can
have preceded unseen (it is compare-and-swap). So a new URL, secret or event list applies to
every event committed after it, and a webhook disabled or deleted before an event was committed
is never sent it, however late the deliverer's own mirror of the records catches up (it cancels
the worker then too). A retry reads the record again. Skipping an event needs no such read: the
mirror decides.

Settling a finished delivery — its log entry and the cursor past it — is one transaction guarded
by the record's revision (`Journal.settle`): a delivered event in a burst costs one etcd round
trip, one after a quiet spell two. Only when someone changed the record meanwhile does the
worker fall back to writing the log and then the cursor by a fresh read-modify-write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2 as c
from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.cluster.store import Versioned
from aenv_common.errors import AenvError
from aenv_common.events import e2b_event_type
from aenv_common.secrets.sealing import SealBroken
from aenv_gateway.core.webhooks import metrics, payload
from aenv_gateway.core.webhooks.feed import EventFeed, Position, scope_of
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Attempt

log = logging.getLogger(__name__)

# Skipped events' cursor is written at most this often.
SKIPPED_CURSOR_EVERY_S = 1.0
# After the feed failed (etcd away), the worker starts again after these waits.
FEED_RETRY_S = (0.5, 1.0, 2.0, 5.0)

Current = Callable[[], "Versioned[WebhookRecord] | None"]
Fresh = Callable[[], Awaitable["Versioned[WebhookRecord] | None"]]
Send = Callable[[str, str, str, bytes], Awaitable[Attempt]]
OpenSecret = Callable[[WebhookRecord], str]


class Journal(Protocol):
    async def advance(self, webhook_id: str, cursor: str) -> bool:
        """Stores the webhook's cursor; False when the webhook is gone."""
        ...

    async def log(self, delivery: WebhookDelivery) -> None: ...

    async def settle(
        self, seen: Versioned[WebhookRecord], cursor: str, delivery: WebhookDelivery | None,
    ) -> Versioned[WebhookRecord] | None:
        """In one transaction, while the record is still at `seen`'s revision: logs `delivery`
        (when given) and moves the cursor. The record as written, or None (nothing written)
        when it changed or went."""
        ...


class Worker:
    def __init__(
        self, webhook_id: str, current: Current, fresh: Fresh, feed: EventFeed, send: Send,
        journal: Journal, policy: RetryPolicy, open_secret: OpenSecret,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.webhook_id = webhook_id
        self._current = current
        self._fresh = fresh
        self._feed = feed
        self._send = send
        self._journal = journal
        self._policy = policy
        self._open_secret = open_secret
        self._clock = clock
        self._sleep = sleep
        self._written_at = float("-inf")
        # The record as this worker last wrote it, at its revision (None: unknown).
        self._written: Versioned[WebhookRecord] | None = None

    def _live(self) -> WebhookRecord | None:
        entry = self._current()
        return entry.record if entry is not None and entry.record.enabled else None

    async def run(self) -> None:
        """Delivers until the webhook is disabled or deleted (or the task is cancelled)."""
        failures = 0
        position: Position | None = None
        while (entry := self._current()) is not None and entry.record.enabled:
            scope = scope_of(entry.record.owner_key_id)
            try:
                if position is None:
                    position = await self._feed.position(
                        scope, entry.record.cursor_event_id, entry.create_revision)
                async for revision, event in self._feed.follow(scope, position):
                    failures = 0
                    if not await self._handle(revision, event):
                        return
                    position = Position(revision, event.event_id)
            except AenvError as err:
                self._written = None
                log.warning("webhook worker interrupted", extra={
                    "webhook_id": self.webhook_id, "error": err.message})
            except Exception:
                log.exception("webhook worker failed", extra={"webhook_id": self.webhook_id})
            await self._sleep(FEED_RETRY_S[min(failures, len(FEED_RETRY_S) - 1)])
            failures += 1

    async def _handle(self, revision: int, event: c.SandboxEvent) -> bool:
        """Delivers the event if subscribed, then moves the cursor past it. False: the webhook
        is gone or off."""
        record = self._live()
        if record is None:
            return False
        name = e2b_event_type(event)
        if name is None or name not in record.events:
            if self._clock() - self._written_at >= SKIPPED_CURSOR_EVERY_S:
                return await self._settle(self._written, event.event_id, None)
            return True
        return await self._deliver(revision, event, name)

    async def _settle(self, seen: Versioned[WebhookRecord] | None, cursor: str,
                      delivery: WebhookDelivery | None) -> bool:
        """Logs the delivery (if any) and moves the cursor: one guarded transaction when the
        record is known, else (or when it changed) the log, then a read-modify-write."""
        self._written_at = self._clock()
        if seen is not None:
            self._written = await self._journal.settle(seen, cursor, delivery)
            if self._written is not None:
                return True
        if delivery is not None:
            await self._journal.log(delivery)
        return await self._journal.advance(self.webhook_id, cursor)

    async def _record_for(self, revision: int) -> Versioned[WebhookRecord] | None:
        """The record as it stood at the event's commit or later (module docstring)."""
        written = self._written
        if written is not None and 0 < revision <= written.mod_revision:
            return written
        self._written = None
        return await self._fresh()

    async def _deliver(self, revision: int, event: c.SandboxEvent, name: str) -> bool:
        """Attempts until delivered or given up, then settles (True), or the webhook is gone or
        off (False), or no longer subscribed to the type (True: the cursor moves on)."""
        body = payload.body(event, name)
        delivery = WebhookDelivery(webhook_id=self.webhook_id, event_id=event.event_id)
        first = self._clock()
        entry = await self._record_for(revision)
        while True:
            record = entry.record if entry is not None and entry.record.enabled else None
            if entry is None or record is None:
                return False
            if name not in record.events:
                return await self._settle(entry, event.event_id, None)
            attempt = await self._attempt(record, body)
            delivery.attempts += 1
            delivery.last_status = attempt.status
            delivery.last_error = attempt.error
            delivery.last_attempt_at.GetCurrentTime()
            if delivery.attempts == 1:
                delivery.first_attempt_at.CopyFrom(delivery.last_attempt_at)
            metrics.attempted(attempt)
            if attempt.delivered:
                delivery.delivered = True
                metrics.finished(event, "delivered")
            elif self._policy.exhausted(delivery.attempts, first, self._clock()):
                delivery.gave_up = True
                metrics.finished(event, "gave_up")
                log.warning("webhook delivery given up", extra={
                    "webhook_id": self.webhook_id, "event_id": event.event_id,
                    "attempts": delivery.attempts, "error": attempt.error})
            if delivery.delivered or delivery.gave_up:
                return await self._settle(entry, event.event_id, delivery)
            await self._journal.log(delivery)
            await self._sleep(self._policy.delay(delivery.attempts))
            entry = await self._fresh()
            self._written = None

    async def _attempt(self, record: WebhookRecord, body: bytes) -> Attempt:
        try:
            secret = self._open_secret(record)
        except SealBroken:
            return Attempt(0, "the signature secret does not open with this cluster's secrets "
                              "key", 0.0)
        return await self._send(self.webhook_id, record.url, secret, body)
