"""Where the Secret API's records are kept: etcd (every gateway shares them, nodes watch them),
or memory (tests, a gateway on its own). Both give the same guarantees to `SecretStore`: a
name is claimed together with its record only while unclaimed, and a record is replaced or
deleted only while at the revision its writer read.

Key layout (cluster/keys.py): `<prefix>/secrets/<owner>/<id>` holds the record;
`<prefix>/secret-names/<owner>/<sha256 of the canonical name>` holds the id.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Protocol

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import ClusterStore, Versioned, etcd_errors


def name_digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


class SecretRecords(Protocol):
    async def claim(self, record: SecretRecord) -> bool:
        """Writes the record and claims its name; False (nothing written) if the owner's name
        is taken."""

    async def find_id(self, owner_key_id: str, canonical_name: str) -> str | None: ...

    async def get(self, owner_key_id: str, secret_id: str) -> Versioned[SecretRecord] | None: ...

    async def list(self, owner_key_id: str) -> list[SecretRecord]: ...

    async def swap(self, record: SecretRecord, mod_revision: int) -> bool:
        """Replaces the record while it is at `mod_revision`."""

    async def drop(self, record: SecretRecord, mod_revision: int) -> bool:
        """Deletes the record and its name while it is at `mod_revision`."""


class EtcdSecretRecords:
    def __init__(self, store: ClusterStore) -> None:
        self._client = store.client
        self._keys = store.keys

    def _claim_key(self, owner_key_id: str, canonical_name: str) -> bytes:
        return self._keys.secret_name(owner_key_id, name_digest(canonical_name))

    async def claim(self, record: SecretRecord) -> bool:
        claim = self._claim_key(record.owner_key_id, record.name)
        txn = self._client.transactions
        with etcd_errors(f"create secret of {record.owner_key_id}"):
            created, _ = await self._client.transaction(
                compare=[txn.create(claim) == 0],
                success=[txn.put(claim, record.secret_id.encode()),
                         txn.put(self._keys.secret(record.owner_key_id, record.secret_id),
                                 encode(record))],
                failure=[])
        return bool(created)

    async def find_id(self, owner_key_id: str, canonical_name: str) -> str | None:
        with etcd_errors(f"get secret of {owner_key_id}"):
            found = await self._client.get(self._claim_key(owner_key_id, canonical_name))
        return None if found is None else found.value.decode()

    async def get(self, owner_key_id: str, secret_id: str) -> Versioned[SecretRecord] | None:
        with etcd_errors(f"get secret of {owner_key_id}"):
            kv = await self._client.get(self._keys.secret(owner_key_id, secret_id))
        if kv is None:
            return None
        return Versioned(decode(SecretRecord, kv.value), kv.mod_revision, kv.create_revision,
                         kv.lease)

    async def list(self, owner_key_id: str) -> list[SecretRecord]:
        with etcd_errors(f"list secrets of {owner_key_id}"):
            found = await self._client.get_prefix(self._keys.owner_secrets(owner_key_id))
        return [decode(SecretRecord, kv.value) for kv in found.kvs]

    async def swap(self, record: SecretRecord, mod_revision: int) -> bool:
        key = self._keys.secret(record.owner_key_id, record.secret_id)
        txn = self._client.transactions
        with etcd_errors(f"update secret of {record.owner_key_id}"):
            swapped, _ = await self._client.transaction(
                compare=[txn.mod(key) == mod_revision],
                success=[txn.put(key, encode(record))], failure=[])
        return bool(swapped)

    async def drop(self, record: SecretRecord, mod_revision: int) -> bool:
        key = self._keys.secret(record.owner_key_id, record.secret_id)
        claim = self._claim_key(record.owner_key_id, record.name)
        txn = self._client.transactions
        with etcd_errors(f"destroy secret of {record.owner_key_id}"):
            dropped, _ = await self._client.transaction(
                compare=[txn.mod(key) == mod_revision],
                success=[txn.delete(key), txn.delete(claim)], failure=[])
        return bool(dropped)


class InMemorySecretRecords:
    """Tests' records, and a gateway's without etcd (no node sees them)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], Versioned[SecretRecord]] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._revisions = itertools.count(1)

    async def claim(self, record: SecretRecord) -> bool:
        if (record.owner_key_id, record.name) in self._names:
            return False
        self._names[record.owner_key_id, record.name] = record.secret_id
        self._put(record)
        return True

    async def find_id(self, owner_key_id: str, canonical_name: str) -> str | None:
        return self._names.get((owner_key_id, canonical_name))

    async def get(self, owner_key_id: str, secret_id: str) -> Versioned[SecretRecord] | None:
        return self._records.get((owner_key_id, secret_id))

    async def list(self, owner_key_id: str) -> list[SecretRecord]:
        return [v.record for (owner, _), v in self._records.items() if owner == owner_key_id]

    async def swap(self, record: SecretRecord, mod_revision: int) -> bool:
        if not self._at(record, mod_revision):
            return False
        self._put(record)
        return True

    async def drop(self, record: SecretRecord, mod_revision: int) -> bool:
        if not self._at(record, mod_revision):
            return False
        del self._records[record.owner_key_id, record.secret_id]
        del self._names[record.owner_key_id, record.name]
        return True

    def _at(self, record: SecretRecord, mod_revision: int) -> bool:
        current = self._records.get((record.owner_key_id, record.secret_id))
        return current is not None and current.mod_revision == mod_revision

    def _put(self, record: SecretRecord) -> None:
        stored = SecretRecord()
        stored.CopyFrom(record)
        revision = next(self._revisions)
        key = (record.owner_key_id, record.secret_id)
        created = self._records[key].create_revision if key in self._records else revision
        self._records[key] = Versioned(stored, revision, created, 0)
