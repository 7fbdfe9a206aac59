"""Experiment leases as the API offers them (docs/leases.md): taken, renewed, read, listed and
released by the API key that holds them, and named by creates.

The gateway only keeps the record: etcd ends a lease nobody renews, and every node agent ends
its own sandboxes under a lease whose key is gone (aenv_nodeagent.leases). So a trainer that
crashes, or loses its network, or whose gateway dies, loses its sandboxes within the ttl.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument, NotFound
from aenv_common.leases import (
    LEASE_METADATA_KEY,
    MAX_TTL_S,
    MIN_TTL_S,
    expiry_action,
    is_lease_id,
    new_lease_id,
)
from aenv_gateway.core.leases.records import LeaseRecord, LeaseStore
from aenv_gateway.core.listing import VISIBLE_STATES
from aenv_gateway.keys.auth import ADMIN_KEY_ID

log = logging.getLogger(__name__)

MAX_NAME = 128
MAX_METADATA = 64
MAX_METADATA_KEY = 128
MAX_METADATA_VALUE = 1024


@dataclass(frozen=True)
class LeaseView:
    """A lease as answered: its record, when it lapses unless renewed (unix seconds) and how many
    sandboxes (running or paused) live under it."""

    record: LeaseRecord
    expires_at: float
    sandbox_count: int


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


class Leases:
    def __init__(
        self, store: LeaseStore,
        sandboxes: Callable[[], Iterable[cluster_pb2.SandboxRecord]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._sandboxes = sandboxes
        self._clock = clock

    async def create(
        self, owner: str, ttl_s: int, on_expiry: int, name: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> LeaseView:
        """:raise InvalidArgument: the ttl out of 5..3600 s, an unknown action, a name or
        metadata out of bounds."""
        if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
            raise InvalidArgument(f"ttlSeconds must be between {MIN_TTL_S} and {MAX_TTL_S}")
        if on_expiry not in cluster_pb2.LeaseExpiryAction.values():
            raise InvalidArgument("onExpiry must be kill or pause")
        if len(name) > MAX_NAME:
            raise InvalidArgument(f"name must be at most {MAX_NAME} characters")
        _check_metadata(metadata or {})
        record = cluster_pb2.LeaseRecord(
            lease_id=new_lease_id(), owner_key_id=owner, name=name, ttl_seconds=ttl_s,
            on_expiry=expiry_action(on_expiry), created_at=timestamp(self._clock()),
            metadata=dict(metadata or {}),
        )
        stored = await self._store.create(record)
        log.info("lease created", extra={"lease_id": stored.lease_id, "ttl_s": ttl_s,
                                         "on_expiry": on_expiry, "owner_key_id": owner})
        return LeaseView(stored, self._clock() + ttl_s, 0)

    async def renew(self, owner: str, lease_id: str) -> float:
        """When it now lapses unless renewed again (unix seconds).

        :raise NotFound: no such lease of `owner`'s, or it lapsed already.
        """
        record = await self._held(owner, lease_id)
        remaining = await self._store.renew(record)
        if remaining is None:
            raise _lapsed(lease_id)
        return self._clock() + remaining

    async def get(self, owner: str, lease_id: str) -> LeaseView:
        """:raise NotFound: no such lease of `owner`'s (or lapsed)."""
        record = await self._held(owner, lease_id)
        view = await self._view(record)
        if view is None:
            raise _lapsed(lease_id)
        return view

    async def list(self, owner: str) -> list[LeaseView]:
        """`owner`'s leases, oldest first (the admin key's: every key's)."""
        records = [r for r in await self._store.list() if _visible(r, owner)]
        records.sort(key=lambda r: (r.created_at.ToNanoseconds(), r.lease_id))
        views = [await self._view(r) for r in records]
        return [v for v in views if v is not None]

    async def release(self, owner: str, lease_id: str) -> None:
        """Ends the lease now: its sandboxes end as if it had lapsed.

        :raise NotFound: no such lease of `owner`'s (or lapsed already).
        """
        record = await self._held(owner, lease_id)
        await self._store.release(record)
        log.info("lease released", extra={"lease_id": lease_id, "owner_key_id": owner})

    async def admit(
        self, owner: str, lease_id: str, metadata: Mapping[str, str]
    ) -> tuple[str, dict[str, str]]:
        """The lease a create names (`lease_id`, else the metadata's `aenv.lease`), checked,
        and the metadata the sandbox gets (naming its lease, so a metadata filter finds it).
        ("", metadata) for a create under no lease.

        :raise NotFound: the lease does not exist, lapsed, or `owner` does not hold it.
        :raise InvalidArgument: the field and the metadata name different leases.
        """
        named = metadata.get(LEASE_METADATA_KEY, "")
        if lease_id and named and named != lease_id:
            raise InvalidArgument(
                f"lease_id {lease_id!r} and metadata {LEASE_METADATA_KEY} {named!r} differ")
        lease_id = lease_id or named
        if not lease_id:
            return "", dict(metadata)
        record = await self._found(lease_id)
        if record is None or record.owner_key_id != owner:
            raise _lapsed(lease_id)
        return lease_id, {**metadata, LEASE_METADATA_KEY: lease_id}

    async def _held(self, owner: str, lease_id: str) -> LeaseRecord:
        record = await self._found(lease_id)
        if record is None or not _visible(record, owner):
            raise _lapsed(lease_id)
        return record

    async def _found(self, lease_id: str) -> LeaseRecord | None:
        # An id that cannot be a lease's (a '/' would address another key) is simply none.
        return await self._store.get(lease_id) if is_lease_id(lease_id) else None

    async def _view(self, record: LeaseRecord) -> LeaseView | None:
        remaining = await self._store.remaining(record)
        if remaining is None:
            return None
        count = sum(1 for s in self._sandboxes()
                    if s.lease_id == record.lease_id and s.state in VISIBLE_STATES)
        return LeaseView(record, self._clock() + remaining, count)


def _visible(record: LeaseRecord, owner: str) -> bool:
    """A key sees its own leases; the admin key (the configured one) every key's."""
    return record.owner_key_id == owner or owner == ADMIN_KEY_ID


def _lapsed(lease_id: str) -> NotFound:
    return NotFound(f'lease "{lease_id}" not found (it lapsed, was released or never was)')


def _check_metadata(metadata: Mapping[str, str]) -> None:
    if len(metadata) > MAX_METADATA:
        raise InvalidArgument(f"metadata holds at most {MAX_METADATA} entries")
    for key, value in metadata.items():
        if not key or len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise InvalidArgument(f"metadata keys are 1..{MAX_METADATA_KEY} characters and "
                                  f"values at most {MAX_METADATA_VALUE}")
