"""The wing's one collaborator for sandbox events (docs/architecture.md, "Events and death
certificates"): every state change this node makes is announced by whoever makes it, through here.

Three ways to write, by what the change needs:
- `publish`: the record and its event in one etcd transaction (READY, RESUMED, PAUSED, UPDATED):
  the event is there exactly when the state it names is, and costs no round trip of its own.
- `announce` / `announce_soon`: the event alone, best effort (CREATED at accept, KILLED, FORKED,
  SNAPSHOTTED): an event never fails the operation it reports; a failure is logged and counted.
- `died`: a death certificate and its DIED event together, retried in the background until etcd
  takes them: a death is the one fact a trainer must not miss. `died_replacing` writes them with
  the record's delete, for a sandbox no node holds.

Built off (`SandboxEvents.off`, the node agent's `events_enabled` false) it writes no event and no
certificate, and `publish` is a plain record put: the benchmark's events-off arm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeAlias

from opentelemetry import trace
from prometheus_client import Counter

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import keys as cluster_keys
from aenv_common.cluster.codec import encode
from aenv_common.errors import AenvError
from aenv_common.events import TYPE_NAMES, EventLog, cause_name, new_event_id
from aenv_common.events.log import DEATHS
from aenv_nodeagent.sandbox.model import Paused, Sandbox
from aenv_nodeagent.sandbox.records import SandboxRecords

log = logging.getLogger(__name__)

EVENTS_TOTAL = Counter(
    "aenv_node_events_total",
    "Sandbox events this node agent wrote (recorded) or could not write (failed).",
    ["type", "outcome"],
)

# What an event is about: whatever the operation has at hand.
Subject: TypeAlias = Sandbox | Paused | c.SandboxRecord | c.SandboxSpec
DIED = c.SANDBOX_EVENT_TYPE_DIED
# A death not taken yet is tried again after this long, doubling up to the cap.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 10.0
# How long `close` lets writes in flight finish before it cancels them.
CLOSE_GRACE_S = 2.0


class SandboxEvents:
    """Announces this node's sandboxes' state changes.

    :param records: where `publish` puts the record when events are off.
    :param event_log: None: events off.
    """

    def __init__(
        self, records: SandboxRecords, node_id: str, event_log: EventLog | None = None
    ) -> None:
        self._records = records
        self._node_id = node_id
        self._log = event_log
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def off(cls, records: SandboxRecords, node_id: str) -> SandboxEvents:
        """The null variant: no event, no certificate."""
        return cls(records, node_id)

    @property
    def enabled(self) -> bool:
        return self._log is not None

    @property
    def node_id(self) -> str:
        return self._node_id

    # --- what an event says ----------------------------------------------------------------------

    def event(
        self, subject: Subject, type_: c.SandboxEventType, *, detail: str = "",
        related: Sequence[str] = (), cause: c.DeathCause = c.DEATH_CAUSE_UNSPECIFIED,
    ) -> c.SandboxEvent:
        """The event, stamped now (so it sorts where the change happened, however late it is
        written), with the sandbox's identity and the current span's trace."""
        source = subject.record if isinstance(subject, Sandbox | Paused) else subject
        event = c.SandboxEvent(
            sandbox_id=source.sandbox_id, type=type_, node_id=self._node_id,
            template_id=source.catalog_template_id or source.template_id,
            metadata=dict(source.metadata), owner_key_id=source.owner_key_id,
            lease_id=source.lease_id, cause=cause, detail=detail,
            related_sandbox_ids=list(related), trace_id=current_trace_id())
        now_ns = time.time_ns()
        event.event_id = new_event_id(now_ns)
        event.time.FromNanoseconds(now_ns)
        return event

    def certificate(self, event: c.SandboxEvent) -> c.DeathCertificate:
        return c.DeathCertificate(
            sandbox_id=event.sandbox_id, cause=event.cause, detail=event.detail,
            node_id=event.node_id, owner_key_id=event.owner_key_id,
            metadata=dict(event.metadata), template_id=event.template_id)

    # --- writing --------------------------------------------------------------------------------

    async def announce(
        self, subject: Subject, type_: c.SandboxEventType, *, detail: str = "",
        related: Sequence[str] = (), cause: c.DeathCause = c.DEATH_CAUSE_UNSPECIFIED,
    ) -> None:
        """Records the event; best effort: a failure is logged and counted, never raised."""
        if not self.enabled:
            return
        await self._best_effort(self.event(subject, type_, detail=detail, related=related,
                                           cause=cause))

    def announce_soon(
        self, subject: Subject, type_: c.SandboxEventType, *, detail: str = "",
        related: Sequence[str] = (),
    ) -> None:
        """`announce` in the background (CREATED: off the create's critical path), stamped now."""
        if self.enabled:
            event = self.event(subject, type_, detail=detail, related=related)
            self._background(self._best_effort(event))

    async def died(
        self, subject: Subject, cause: c.DeathCause, detail: str
    ) -> c.DeathCertificate | None:
        """The sandbox ended for a reason other than its owner's kill or its timeout: its death
        certificate and DIED event, together. Tried once here; when etcd does not take them,
        again in the background (same event id: a retry writes the same keys) until it does.
        The certificate (None when events are off), for a record that keeps it."""
        if not self.enabled:
            return None
        event = self.event(subject, DIED, detail=detail, cause=cause)
        certificate = self.certificate(event)
        log.warning("sandbox died", extra={"sandbox_id": event.sandbox_id,
                                           "cause": cause_name(cause), "detail": detail})
        if not await self._certify(event, certificate):
            self._background(self._certify_until_taken(event, certificate))
        return certificate

    async def died_replacing(
        self, record: c.SandboxRecord, revision: int, cause: c.DeathCause, detail: str
    ) -> bool:
        """A sandbox no node holds (a paused orphan) ended: its record, read at `revision`,
        deleted, and its certificate and DIED event written, in one transaction that only
        holds while the record is at that revision. False when it changed (a node took it
        over): nothing was written. Events must be on.

        :raise Unavailable: etcd did not answer (the record stays: a later try ends it).
        """
        assert self._log is not None
        event = self.event(record, DIED, detail=detail, cause=cause)
        key = self._log.store.keys.record(cluster_keys.SANDBOXES, record.sandbox_id)
        if not await self._log.certify(self.certificate(event), event,
                                       replacing=(key, revision)):
            return False
        _count(event, "recorded")
        log.warning("sandbox died", extra={"sandbox_id": event.sandbox_id,
                                           "cause": cause_name(cause), "detail": detail})
        return True

    async def operations(
        self, subject: Subject, type_: c.SandboxEventType, *, detail: str = "",
        related: Sequence[str] = (),
    ) -> list[Any]:
        """The transaction operations that record the event, for a writer's own transaction
        (none when events are off)."""
        if self._log is None:
            return []
        return await self._log.operations(
            self.event(subject, type_, detail=detail, related=related))

    async def publish(
        self, record: c.SandboxRecord, type_: c.SandboxEventType, *,
        detail: str = "", related: Sequence[str] = (), revived: bool = False,
    ) -> None:
        """Puts the sandbox's record and records its event in one transaction (`revived`: the
        record was marked lost and is back: its certificate goes in the same transaction).

        :raise Unavailable, Internal: etcd did not take it; neither is written.
        """
        if revived:
            record.ClearField("death")
        if not self.enabled:
            await self._records.put_sandbox(record)
            return
        event = self.event(record, type_, detail=detail, related=related)
        try:
            await self._write_with_record(event, record, revived=revived)
        except AenvError:
            _count(event, "failed")
            raise
        _count(event, "recorded")

    async def close(self) -> None:
        """Lets the writes in flight finish for a moment, then cancels what is left (a death
        not taken by then is logged: its record says lost, or is gone)."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=CLOSE_GRACE_S)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("sandbox events not written before the stop",
                        extra={"count": len(pending)})
            await asyncio.gather(*pending, return_exceptions=True)

    # --- the I/O seams (tests' fakes replace these) ---------------------------------------------

    async def _write(self, event: c.SandboxEvent) -> None:
        assert self._log is not None
        await self._log.record(event)

    async def _write_death(self, event: c.SandboxEvent, certificate: c.DeathCertificate) -> None:
        assert self._log is not None
        await self._log.certify(certificate, event)

    async def _write_with_record(
        self, event: c.SandboxEvent, record: c.SandboxRecord, *, revived: bool
    ) -> None:
        """The record's put (as ClusterStore.put_sandbox writes it) and the event, in one
        transaction; `revived`: the sandbox's certificate deleted in it too."""
        assert self._log is not None
        store = self._log.store
        txn = store.client.transactions
        ops = [txn.put(store.keys.record(cluster_keys.SANDBOXES, record.sandbox_id),
                       encode(record))]
        if revived:
            ops.append(txn.delete(store.keys.record(DEATHS, record.sandbox_id)))
        await self._log.commit(ops, [event])

    # --- internals ------------------------------------------------------------------------------

    async def _best_effort(self, event: c.SandboxEvent) -> None:
        try:
            await self._write(event)
        except AenvError as err:
            _count(event, "failed")
            log.warning("sandbox event not recorded", extra={
                "sandbox_id": event.sandbox_id, "type": _type_name(event), "error": err.message})
            return
        _count(event, "recorded")

    async def _certify(self, event: c.SandboxEvent, certificate: c.DeathCertificate) -> bool:
        try:
            await self._write_death(event, certificate)
        except AenvError as err:
            _count(event, "failed")
            log.warning("death certificate not recorded yet", extra={
                "sandbox_id": event.sandbox_id, "error": err.message})
            return False
        _count(event, "recorded")
        return True

    async def _certify_until_taken(
        self, event: c.SandboxEvent, certificate: c.DeathCertificate
    ) -> None:
        delay = RETRY_FIRST_S
        while True:
            await asyncio.sleep(delay)
            if await self._certify(event, certificate):
                return
            delay = min(delay * 2, RETRY_MAX_S)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def current_trace_id() -> str:
    """The current span's trace id (32 hex digits), or "" outside a valid span."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def _type_name(event: c.SandboxEvent) -> str:
    return TYPE_NAMES.get(event.type, "unknown")


def _count(event: c.SandboxEvent, outcome: str) -> None:
    EVENTS_TOTAL.labels(_type_name(event), outcome).inc()

