"""Events and death certificates in etcd, each on a retention lease.

Keys (under the cluster prefix): `events/<event id>` (every event, in time order),
`sandbox-events/<sandbox id>/<event id>` (one sandbox's), `key-events/<owner key id>/<event id>`
(one API key's sandboxes'), `deaths/<sandbox id>`. Each holds the whole record, so a reader of
an index needs no second read. Keys are bound to a lease granted for the retention plus one
bucket and shared by every write of that bucket: one lease per bucket, not per event, and etcd
removes what aged out.

A writer that changes a record as well passes `operations(...)` into its own transaction, so the
change and its event land together or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common import errors
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import ClusterStore, etcd_errors, lease_gone
from aenv_common.events.names import new_event_id

log = logging.getLogger(__name__)

EVENTS = "events"
SANDBOX_EVENTS = "sandbox-events"
KEY_EVENTS = "key-events"
DEATHS = "deaths"
# Events of sandboxes created without a key (the configured admin key's have its id).
NO_KEY = "-"
DEFAULT_RETENTION_S = 24 * 3600


class EventLog:
    """Records and reads sandbox events and death certificates.

    :param retention_s: how long an event (and a certificate) is kept at least.
    """

    def __init__(self, store: ClusterStore, retention_s: int = DEFAULT_RETENTION_S) -> None:
        self._store = store
        self._retention_s = retention_s
        self._bucket_s = max(60, retention_s // 24)
        self._lease: tuple[int, float] | None = None  # lease id, monotonic time granted
        self._lease_lock = asyncio.Lock()

    @property
    def store(self) -> ClusterStore:
        return self._store

    def prefix(self, kind: str, scope: str = "") -> bytes:
        """The key prefix of a kind's keys (`scope`: a sandbox id or owner key id)."""
        base = self._store.keys.collection(kind)
        return base + f"{scope}/".encode() if scope else base

    def stamp(self, event: c.SandboxEvent) -> c.SandboxEvent:
        """Gives the event its id and time when it has none."""
        if not event.event_id:
            now_ns = time.time_ns()
            event.event_id = new_event_id(now_ns)
            event.time.FromNanoseconds(now_ns)
        return event

    async def operations(self, event: c.SandboxEvent) -> list[Any]:
        """The transaction operations that record `event` (stamped here when it has no id)."""
        self.stamp(event)
        lease = await self._retention_lease()
        value = encode(event)
        txn = self._store.client.transactions
        owner = event.owner_key_id or NO_KEY
        return [
            txn.put(self.prefix(EVENTS) + event.event_id.encode(), value, lease),
            txn.put(self.prefix(SANDBOX_EVENTS, event.sandbox_id) + event.event_id.encode(),
                    value, lease),
            txn.put(self.prefix(KEY_EVENTS, owner) + event.event_id.encode(), value, lease),
        ]

    async def record(self, *events: c.SandboxEvent) -> None:
        """Records events in one transaction.

        :raise Unavailable: etcd did not answer.
        """
        await self.commit([], events)

    async def certify(
        self, certificate: c.DeathCertificate, event: c.SandboxEvent, *,
        replacing: tuple[bytes, int] | None = None,
    ) -> bool:
        """Records a death: its certificate and its DIED (or LOST) event, together. With
        `replacing` (a record's key and the revision it was read at), the record is deleted in
        the same transaction, only while it is still at that revision: the sandbox is never
        neither there nor certified. False when that record changed (nothing was written).

        :raise Unavailable: etcd did not answer.
        """
        self.stamp(event)
        certificate.event_id = event.event_id
        if not certificate.HasField("time"):
            certificate.time.CopyFrom(event.time)
        lease = await self._retention_lease()
        txn = self._store.client.transactions
        ops = [txn.put(self._death_key(certificate.sandbox_id), encode(certificate), lease)]
        compare = []
        if replacing is not None:
            key, revision = replacing
            ops.append(txn.delete(key))
            compare.append(txn.mod(key) == revision)
        return await self.commit(ops, [event], compare=compare)

    async def commit(
        self, operations: Sequence[Any], events: Sequence[c.SandboxEvent],
        compare: Sequence[Any] = (),
    ) -> bool:
        """Runs `operations` and records `events` in one transaction, if every `compare` holds
        (none: always); whether they held."""
        for attempt in range(2):
            ops = list(operations)
            for event in events:
                ops += await self.operations(event)
            try:
                with etcd_errors("record sandbox events"):
                    succeeded, _ = await self._store.client.transaction(
                        compare=list(compare), success=ops, failure=[])
                return bool(succeeded)
            except errors.Internal as err:
                if attempt or not lease_gone(err):
                    raise
                self._lease = None  # revoked or expired early (etcd restored): take a new one
        raise AssertionError("unreachable")

    async def death(self, sandbox_id: str) -> c.DeathCertificate | None:
        """The certificate of a sandbox that died, while retained.

        :raise Unavailable: etcd did not answer.
        """
        with etcd_errors(f"get death of {sandbox_id}"):
            kv = await self._store.client.get(self._death_key(sandbox_id))
        return None if kv is None else decode(c.DeathCertificate, kv.value)

    async def events(self, kind: str, scope: str = "") -> list[c.SandboxEvent]:
        """Every retained event of one index, oldest first (`kind`: EVENTS, SANDBOX_EVENTS with a
        sandbox id, KEY_EVENTS with an owner key id or NO_KEY).

        :raise Unavailable: etcd did not answer.
        """
        with etcd_errors(f"list {kind} {scope}"):
            result = await self._store.client.get_prefix(self.prefix(kind, scope))
        return [decode(c.SandboxEvent, kv.value) for kv in result.kvs]

    async def retention_lease(self, replace: bool = False) -> int:
        """The lease the current bucket's events are bound to: what lives as long as they do
        (a webhook's delivery log) is put on it too. `replace`: the one given before is gone
        (a write on it failed with "lease not found"), take a new one.

        :raise Unavailable: etcd did not answer."""
        if replace:
            self._lease = None
        return await self._retention_lease()

    def _death_key(self, sandbox_id: str) -> bytes:
        return self._store.keys.record(DEATHS, sandbox_id)

    async def _retention_lease(self) -> int:
        async with self._lease_lock:
            now = time.monotonic()
            if self._lease is None or now - self._lease[1] >= self._bucket_s:
                with etcd_errors("grant the events' retention lease"):
                    granted = await self._store.client.lease(self._retention_s + self._bucket_s)
                self._lease = (granted.id, now)
            return self._lease[0]

