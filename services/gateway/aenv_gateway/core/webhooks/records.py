"""Where webhooks and their delivery logs are kept: etcd in a cluster, memory in tests and a
gateway run on its own (which has no events to deliver either).

Keys (under the cluster prefix): `webhooks/<webhook id>` holds the `WebhookRecord` (its secret
sealed, its cursor); `webhook-deliveries/<webhook id>/<event id>` one event's `WebhookDelivery`,
on the events' retention lease, so the log ages out with the events it speaks of. Every change
of a record is compare-and-swap on the revision its writer read: a PATCH and the deliverer
advancing the cursor never overwrite each other.

`webhook-owners/<owner key id>` is a key's guard: every create rewrites it in the transaction
that puts the record, and commits only while the guard is where it was when the key's webhooks
were counted, so two gateways racing at the cap cannot both pass it. (Outside `webhooks/`, where
every key is a webhook's record; a delete leaves it, as lowering the count needs no guard.)
"""

from __future__ import annotations

import itertools
from typing import Protocol

from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import Versioned, etcd_errors
from aenv_common.errors import Conflict

WEBHOOKS = "webhooks"
WEBHOOK_DELIVERIES = "webhook-deliveries"
WEBHOOK_OWNERS = "webhook-owners"
# Creates of one key racing each other: each loser counts again, this many times at most.
CREATE_ATTEMPTS = 16


class WebhookRecords(Protocol):
    async def create(self, record: WebhookRecord, most: int) -> bool:
        """Creates the record unless its owner has `most` webhooks already (False then), also
        when creates race each other.

        :raise Conflict: other creates of the key kept winning."""
        ...

    async def get(self, webhook_id: str) -> Versioned[WebhookRecord] | None: ...

    async def every(self) -> list[WebhookRecord]: ...

    async def revision(self) -> int:
        """The store's current revision (a re-enabled webhook resumes after it)."""
        ...

    async def swap(self, record: WebhookRecord, mod_revision: int) -> bool:
        """Replaces the record while it is at `mod_revision`; False if it changed (or went)."""
        ...

    async def delete(self, webhook_id: str) -> bool:
        """Deletes the record and its delivery log; False if there was no record."""
        ...

    async def deliveries(self, webhook_id: str) -> list[WebhookDelivery]:
        """The retained delivery log, oldest event first."""
        ...


class EtcdWebhookRecords:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    def _key(self, webhook_id: str) -> bytes:
        return self._store.keys.record(WEBHOOKS, webhook_id)

    def deliveries_prefix(self, webhook_id: str) -> bytes:
        return self._store.keys.record(WEBHOOK_DELIVERIES, webhook_id) + b"/"

    async def create(self, record: WebhookRecord, most: int) -> bool:
        guard = self._store.keys.record(WEBHOOK_OWNERS, record.owner_key_id)
        txn = self._store.client.transactions
        for _ in range(CREATE_ATTEMPTS):
            with etcd_errors(f"read the webhook guard of key {record.owner_key_id}"):
                seen = await self._store.client.get(guard)
            # Counted after the guard was read: a create in between moved the guard.
            if _owned(await self.every(), record.owner_key_id) >= most:
                return False
            with etcd_errors(f"create webhook {record.webhook_id}"):
                created, _ = await self._store.client.transaction(
                    compare=[txn.mod(guard) == (seen.mod_revision if seen else 0)],
                    success=[txn.put(guard, record.webhook_id.encode()),
                             txn.put(self._key(record.webhook_id), encode(record))],
                    failure=[])
            if created:
                return True
        raise Conflict(f"webhooks of key {record.owner_key_id} kept being created; "
                       "create abandoned")

    async def get(self, webhook_id: str) -> Versioned[WebhookRecord] | None:
        return await self._store.get_versioned(WEBHOOKS, webhook_id, WebhookRecord)

    async def every(self) -> list[WebhookRecord]:
        return await self._store.list_records(WEBHOOKS, WebhookRecord)

    async def revision(self) -> int:
        with etcd_errors("read the store's revision"):
            result = await self._store.client.get_prefix(
                self._store.keys.collection(WEBHOOKS), keys_only=True)
        return int(result.header.revision)

    async def swap(self, record: WebhookRecord, mod_revision: int) -> bool:
        if not mod_revision:
            return False  # 0 would mean "absent": a deleted webhook is not re-created
        return await self._store.put_guarded(
            WEBHOOKS, record.webhook_id, mod_revision, (WEBHOOKS, record.webhook_id, record))

    async def delete(self, webhook_id: str) -> bool:
        txn = self._store.client.transactions
        prefix = self.deliveries_prefix(webhook_id)
        key = self._key(webhook_id)
        with etcd_errors(f"delete webhook {webhook_id}"):
            found, _ = await self._store.client.transaction(
                compare=[txn.version(key) > 0],
                success=[txn.delete(key), txn.delete(prefix, _prefix_end(prefix))],
                failure=[])
        return bool(found)

    async def deliveries(self, webhook_id: str) -> list[WebhookDelivery]:
        with etcd_errors(f"list deliveries of webhook {webhook_id}"):
            result = await self._store.client.get_prefix(self.deliveries_prefix(webhook_id))
        return [decode(WebhookDelivery, kv.value) for kv in result.kvs]

    async def put_delivery(self, delivery: WebhookDelivery, lease: int) -> None:
        with etcd_errors(f"log a delivery of webhook {delivery.webhook_id}"):
            await self._store.client.put(self._delivery_key(delivery), encode(delivery), lease)

    def _delivery_key(self, delivery: WebhookDelivery) -> bytes:
        return self.deliveries_prefix(delivery.webhook_id) + delivery.event_id.encode()

    async def settle(
        self, record: WebhookRecord, mod_revision: int, delivery: WebhookDelivery | None,
        lease: int,
    ) -> int | None:
        """Puts the record and logs `delivery` (on `lease`) in one transaction, while the record
        is at `mod_revision`; the revision written, or None when it changed or went."""
        txn = self._store.client.transactions
        key = self._key(record.webhook_id)
        writes = [txn.put(key, encode(record))]
        if delivery is not None:
            writes.append(txn.put(self._delivery_key(delivery), encode(delivery), lease))
        with etcd_errors(f"settle a delivery of webhook {record.webhook_id}"):
            succeeded, responses = await self._store.client.transaction(
                compare=[txn.mod(key) == mod_revision], success=writes, failure=[])
        if not succeeded or not mod_revision:
            return None
        return int(responses[0].response_put.header.revision)


def _owned(records: list[WebhookRecord], owner_key_id: str) -> int:
    return sum(r.owner_key_id == owner_key_id for r in records)


def _prefix_end(prefix: bytes) -> bytes:
    """The first key past every key that starts with `prefix`."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


class InMemoryWebhookRecords:
    def __init__(self) -> None:
        self._records: dict[str, Versioned[WebhookRecord]] = {}
        self._deliveries: dict[str, dict[str, WebhookDelivery]] = {}
        self._revisions = itertools.count(1)
        self._revision = 0

    def _next(self) -> int:
        self._revision = next(self._revisions)
        return self._revision

    def _keep(self, record: WebhookRecord, created: int) -> None:
        copy = WebhookRecord()
        copy.CopyFrom(record)
        self._records[record.webhook_id] = Versioned(copy, self._next(), created or
                                                     self._revision, 0)

    async def create(self, record: WebhookRecord, most: int) -> bool:
        if _owned(await self.every(), record.owner_key_id) >= most:
            return False
        self._keep(record, 0)
        return True

    async def get(self, webhook_id: str) -> Versioned[WebhookRecord] | None:
        found = self._records.get(webhook_id)
        if found is None:
            return None
        copy = WebhookRecord()
        copy.CopyFrom(found.record)
        return Versioned(copy, found.mod_revision, found.create_revision, 0)

    async def every(self) -> list[WebhookRecord]:
        return [v.record for v in self._records.values()]

    async def revision(self) -> int:
        return self._revision

    async def swap(self, record: WebhookRecord, mod_revision: int) -> bool:
        current = self._records.get(record.webhook_id)
        if current is None or current.mod_revision != mod_revision:
            return False
        self._keep(record, current.create_revision)
        return True

    async def delete(self, webhook_id: str) -> bool:
        self._deliveries.pop(webhook_id, None)
        return self._records.pop(webhook_id, None) is not None

    async def deliveries(self, webhook_id: str) -> list[WebhookDelivery]:
        log = self._deliveries.get(webhook_id, {})
        return [log[k] for k in sorted(log)]

    async def put_delivery(self, delivery: WebhookDelivery, lease: int) -> None:
        del lease  # memory keeps no retention
        copy = WebhookDelivery()
        copy.CopyFrom(delivery)
        self._deliveries.setdefault(delivery.webhook_id, {})[delivery.event_id] = copy
