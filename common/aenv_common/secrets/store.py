"""The Secret API's records, for the gateway (E2B's `/secrets`).

Each API key has its own secrets, each a `cluster.v1.SecretRecord` whose value is sealed with
the platform secrets key (sealing.py), the AAD binding owner, id and version. A name is unique
per owner: records.py claims it in the same transaction that writes the record, only if it is
unclaimed, so two creates of one name on two gateways cannot both win. Updates are
compare-and-swap on the record's revision; a destroy deletes the record and its claim together,
and every watcher (SecretValues on the nodes) sees it at once.

Nothing here logs, raises or returns a value in clear: records keep only the sealed bytes.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.cluster.store import Versioned
from aenv_common.errors import AlreadyExists, Conflict, InvalidArgument, NotFound
from aenv_common.secrets.records import SecretRecords
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


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


class SecretStore:
    """create / get / update / list / destroy of one API key's secrets, and `exists` for the
    network-rule checks. `ref` is a secret's id (`sec_…`) or its name (any case)."""

    def __init__(self, records: SecretRecords, key: SecretsKey) -> None:
        self._records = records
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
        if not await self._records.claim(record):
            raise AlreadyExists(f"secret '{canonical}' already exists")
        return record

    async def get(self, owner_key_id: str, ref: str) -> SecretRecord:
        """:raise NotFound: the owner has no such secret."""
        return (await self._versioned(owner_key_id, ref)).record

    async def exists(self, owner_key_id: str, name: str) -> bool:
        """Whether the owner has a secret of this name or id (a malformed one: False)."""
        try:
            await self._versioned(owner_key_id, name)
        except NotFound:
            return False
        return True

    async def list(self, owner_key_id: str) -> list[SecretRecord]:
        """Every secret of the owner, in no particular order (the caller pages)."""
        return await self._records.list(owner_key_id)

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
            if await self._records.swap(record, current.mod_revision):
                return record
        raise Conflict(f"secret '{ref}' kept changing; update abandoned")

    async def destroy(self, owner_key_id: str, ref: str) -> SecretRecord:
        """Deletes the secret and its name. :raise NotFound: no such secret."""
        for _ in range(_ATTEMPTS):
            current = await self._versioned(owner_key_id, ref)
            if await self._records.drop(current.record, current.mod_revision):
                return current.record
        raise Conflict(f"secret '{ref}' kept changing; destroy abandoned")

    async def _versioned(self, owner_key_id: str, ref: str) -> Versioned[SecretRecord]:
        missing = NotFound(f"secret '{ref}' not found")
        try:
            secret_id = (ref.lower() if is_secret_id(ref)
                         else await self._records.find_id(owner_key_id, canonical_name(ref)))
            found = None if secret_id is None else await self._records.get(owner_key_id, secret_id)
        except InvalidArgument:  # a malformed name, or an id holding '/', names no secret
            raise missing from None
        if found is None:
            raise missing
        return found
