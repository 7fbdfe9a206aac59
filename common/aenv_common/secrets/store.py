"""The Secret API's records in etcd, for the gateway (E2B's `/secrets`).

Each API key has its own secrets: `<prefix>/secrets/<owner>/<secret id>` holds a
`cluster.v1.SecretRecord` whose value is sealed with the platform secrets key (sealing.py), the
AAD binding owner, id and version. A name is unique per owner: it is claimed under
`<prefix>/secret-names/<owner>/<sha256 of the name>` (value: the id) in the same transaction
that writes the record, created only if absent, so two creates of one name on two gateways
cannot both win. Updates are compare-and-swap on the record's revision; a destroy deletes the
record and its claim together, and every watcher (SecretValues on the nodes) sees it at once.

Nothing here logs, raises or returns a value in clear: records keep only the sealed bytes.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import ClusterStore, Versioned, etcd_errors
from aenv_common.errors import AlreadyExists, Conflict, InvalidArgument, NotFound
from aenv_common.secrets.rules import (
    ID_PREFIX,
    canonical_name,
    check_metadata,
    check_value,
    is_secret_id,
)
from aenv_common.secrets.sealing import SecretsKey, open_sealed, seal

# Compare-and-swap attempts of an update or destroy racing another writer of the same secret.
_ATTEMPTS = 16


def value_aad(owner_key_id: str, secret_id: str, version: int) -> bytes:
    """What a secret's sealed value is bound to: another record's or version's does not open."""
    return f"aenv-secret\0{owner_key_id}\0{secret_id}\0{version}".encode()


def open_value(key: SecretsKey, record: SecretRecord) -> str:
    """The value in clear. :raise SealBroken: the record's value does not open with `key`."""
    aad = value_aad(record.owner_key_id, record.secret_id, record.current_version)
    return open_sealed(key, record.sealed_value, aad).decode()


def name_digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


class SecretStore:
    """create / get / update / list / destroy of one API key's secrets, and `exists` for the
    network-rule checks. `ref` is a secret's id (`sec_…`) or its name (any case)."""

    def __init__(self, store: ClusterStore, key: SecretsKey) -> None:
        self._store = store
        self._client = store.client
        self._keys = store.keys
        self._key = key

    async def create(
        self, owner_key_id: str, name: str, value: str, metadata: Mapping[str, str]
    ) -> SecretRecord:
        """:raise InvalidArgument: bad name, value or metadata.
        :raise AlreadyExists: the owner has a secret of that name."""
        canonical = canonical_name(name)
        plain = check_value(value)
        record = SecretRecord(
            secret_id=ID_PREFIX + secrets.token_hex(12), name=canonical,
            owner_key_id=owner_key_id, current_version=1, metadata=check_metadata(metadata),
            created_at=_now())
        record.updated_at.CopyFrom(record.created_at)
        record.sealed_value = seal(self._key, plain, value_aad(owner_key_id, record.secret_id, 1))
        claim = self._keys.secret_name(owner_key_id, name_digest(canonical))
        txn = self._client.transactions
        with etcd_errors(f"create secret of {owner_key_id}"):
            created, _ = await self._client.transaction(
                compare=[txn.create(claim) == 0],
                success=[txn.put(claim, record.secret_id.encode()),
                         txn.put(self._keys.secret(owner_key_id, record.secret_id),
                                 encode(record))],
                failure=[])
        if not created:
            raise AlreadyExists(f"secret '{canonical}' already exists")
        return record

    async def get(self, owner_key_id: str, ref: str) -> SecretRecord:
        """:raise NotFound: the owner has no such secret."""
        return (await self._versioned(owner_key_id, ref)).record

    async def exists(self, owner_key_id: str, name: str) -> bool:
        """Whether the owner has a secret of this name (a malformed name: False)."""
        try:
            await self._versioned(owner_key_id, name)
        except NotFound:
            return False
        return True

    async def list(self, owner_key_id: str) -> list[SecretRecord]:
        """Every secret of the owner, in no particular order (the caller pages)."""
        with etcd_errors(f"list secrets of {owner_key_id}"):
            found = await self._client.get_prefix(self._keys.owner_secrets(owner_key_id))
        return [decode(SecretRecord, kv.value) for kv in found.kvs]

    async def update(
        self, owner_key_id: str, ref: str, value: str, metadata: Mapping[str, str] | None
    ) -> SecretRecord:
        """Stores `value` as the next version; `metadata`, when given, replaces the stored.

        :raise NotFound: no such secret. :raise InvalidArgument: bad value or metadata.
        :raise Conflict: other writers kept changing it."""
        plain = check_value(value)
        replacing = None if metadata is None else check_metadata(metadata)
        for _ in range(_ATTEMPTS):
            current = await self._versioned(owner_key_id, ref)
            record = SecretRecord()
            record.CopyFrom(current.record)
            record.current_version += 1
            record.updated_at.CopyFrom(_now())
            if replacing is not None:
                record.metadata.clear()
                record.metadata.update(replacing)
            record.sealed_value = seal(self._key, plain, value_aad(
                owner_key_id, record.secret_id, record.current_version))
            if await self._swap(owner_key_id, record, current.mod_revision):
                return record
        raise Conflict(f"secret '{ref}' kept changing; update abandoned")

    async def destroy(self, owner_key_id: str, ref: str) -> SecretRecord:
        """Deletes the secret and its name. :raise NotFound: no such secret."""
        for _ in range(_ATTEMPTS):
            current = await self._versioned(owner_key_id, ref)
            record = current.record
            key = self._keys.secret(owner_key_id, record.secret_id)
            claim = self._keys.secret_name(owner_key_id, name_digest(record.name))
            txn = self._client.transactions
            with etcd_errors(f"destroy secret of {owner_key_id}"):
                deleted, _ = await self._client.transaction(
                    compare=[txn.mod(key) == current.mod_revision],
                    success=[txn.delete(key), txn.delete(claim)], failure=[])
            if deleted:
                return record
        raise Conflict(f"secret '{ref}' kept changing; destroy abandoned")

    async def _swap(self, owner_key_id: str, record: SecretRecord, mod_revision: int) -> bool:
        key = self._keys.secret(owner_key_id, record.secret_id)
        txn = self._client.transactions
        with etcd_errors(f"update secret of {owner_key_id}"):
            swapped, _ = await self._client.transaction(
                compare=[txn.mod(key) == mod_revision],
                success=[txn.put(key, encode(record))], failure=[])
        return bool(swapped)

    async def _versioned(self, owner_key_id: str, ref: str) -> Versioned[SecretRecord]:
        missing = NotFound(f"secret '{ref}' not found")
        if is_secret_id(ref):
            secret_id = ref.lower()
        else:
            try:
                canonical = canonical_name(ref)
            except InvalidArgument:
                raise missing from None
            claim = self._keys.secret_name(owner_key_id, name_digest(canonical))
            with etcd_errors(f"get secret of {owner_key_id}"):
                found = await self._client.get(claim)
            if found is None:
                raise missing
            secret_id = found.value.decode()
        try:
            key = self._keys.secret(owner_key_id, secret_id)
        except InvalidArgument:  # an id with '/' names no secret
            raise missing from None
        with etcd_errors(f"get secret of {owner_key_id}"):
            kv = await self._client.get(key)
        if kv is None:
            raise missing
        return Versioned(decode(SecretRecord, kv.value), kv.mod_revision, kv.create_revision,
                         kv.lease)
