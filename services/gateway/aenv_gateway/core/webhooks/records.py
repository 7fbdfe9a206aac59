"""Where webhooks and their delivery logs are kept: etcd in a cluster, memory in tests and a
gateway run on its own (which has no events to deliver either).

Keys (under the cluster prefix): `webhooks/<webhook id>` holds the `WebhookRecord` (its secret
sealed, its cursor); `webhook-deliveries/<webhook id>/<event id>` one event's `WebhookDelivery`,
on the events' retention lease, so the log ages out with the events it speaks of. Every change
of a record is compare-and-swap on the revision its writer read: a PATCH and the deliverer
advancing the cursor never overwrite each other.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import Versioned, etcd_errors

WEBHOOKS = "webhooks"
WEBHOOK_DELIVERIES = "webhook-deliveries"


class WebhookRecords(Protocol):
    async def create(self, record: WebhookRecord) -> None: ...

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

    async def create(self, record: WebhookRecord) -> None:
        await self._store.put_record(WEBHOOKS, record.webhook_id, record)

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
        key = self.deliveries_prefix(delivery.webhook_id) + delivery.event_id.encode()
        with etcd_errors(f"log a delivery of webhook {delivery.webhook_id}"):
            await self._store.client.put(key, encode(delivery), lease)


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

    async def create(self, record: WebhookRecord) -> None:
        self._keep(record, 0)

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
