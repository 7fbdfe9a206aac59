"""API keys besides the configured (admin) key: created, listed and revoked while the gateway
runs (routes/keys.py, `aenv auth key`), kept in etcd (`api-keys/<id>`) as the SHA-256 of the
key only, and known to every gateway through its watch. A revoked key stops working at once,
and the requests it opened that are still running are cut (open_requests.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Protocol

from aenv.cluster.v1.cluster_pb2 import ApiKeyRecord
from aenv_common.cluster import ClusterStore, RecordCache

API_KEYS = "api-keys"

# Called with the ids of the keys that are gone, after each change of the records.
RevokedListener = Callable[[set[str]], None]


def key_digest(key: str) -> str:
    """What is stored of a key. Keys are 160 random bits: a plain SHA-256 cannot be reversed
    (a salt or a slow hash guards low-entropy passwords, which these are not)."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyRecords(Protocol):
    def records(self) -> list[ApiKeyRecord]: ...

    async def put(self, record: ApiKeyRecord) -> None: ...

    async def delete(self, key_id: str) -> None: ...

    def on_change(self, listener: Callable[[], None]) -> None: ...


class InMemoryApiKeyRecords:
    """Tests' store, and a gateway's without etcd."""

    def __init__(self) -> None:
        self._records: dict[str, ApiKeyRecord] = {}
        self._listeners: list[Callable[[], None]] = []

    def records(self) -> list[ApiKeyRecord]:
        return list(self._records.values())

    async def put(self, record: ApiKeyRecord) -> None:
        self._records[record.key_id] = record
        self._changed()

    async def delete(self, key_id: str) -> None:
        self._records.pop(key_id, None)
        self._changed()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()


class EtcdApiKeyRecords:
    """The watched `api-keys/` records: a key created or revoked on any gateway is seen by all."""

    def __init__(self, store: ClusterStore) -> None:
        self._store = store
        self._watched = RecordCache(store, API_KEYS, ApiKeyRecord)

    @classmethod
    async def open(cls, store: ClusterStore) -> EtcdApiKeyRecords:
        records = cls(store)
        await records._watched.start()
        return records

    async def close(self) -> None:
        await self._watched.stop()

    def records(self) -> list[ApiKeyRecord]:
        return self._watched.values()

    async def put(self, record: ApiKeyRecord) -> None:
        await self._store.put_record(API_KEYS, record.key_id, record)

    async def delete(self, key_id: str) -> None:
        await self._store.delete_record(API_KEYS, key_id)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._watched.add_listener(lambda _id, _entry: listener())


class KeyIndex:
    """The stored keys by digest, rebuilt on every change; tells listeners which keys went."""

    def __init__(self, records: ApiKeyRecords) -> None:
        self.records = records
        self._by_digest: dict[str, str] = {}
        self._revoked: list[RevokedListener] = []
        self._rebuild()
        records.on_change(self._rebuild)

    def key_id(self, presented: str) -> str | None:
        """The id of the stored key `presented` is. A dict lookup by digest: what its timing
        could tell is about the digest, which says nothing about any key."""
        return self._by_digest.get(key_digest(presented))

    def on_revoked(self, listener: RevokedListener) -> None:
        self._revoked.append(listener)

    def _rebuild(self) -> None:
        before = set(self._by_digest.values())
        self._by_digest = {r.sha256: r.key_id for r in self.records.records()}
        gone = before - set(self._by_digest.values())
        if gone:
            for listener in self._revoked:
                listener(gone)
