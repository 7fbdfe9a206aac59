"""Where leases are kept: `leases/<id>` in etcd, each key bound to an etcd lease of the lease's
ttl (aenv_common.leases), so that etcd itself ends a lease nobody renews, whichever gateway took
it and whether or not any gateway still runs. In memory for tests and a gateway without etcd.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.store import etcd_errors, lease_gone
from aenv_common.errors import Internal
from aenv_common.leases import LEASES

LeaseRecord = cluster_pb2.LeaseRecord


class LeaseStore(Protocol):
    async def create(self, record: LeaseRecord) -> LeaseRecord:
        """Stores `record` for `record.ttl_seconds` from now; the stored record (with its
        etcd_lease)."""
        ...

    async def get(self, lease_id: str) -> LeaseRecord | None:
        """None: no such lease, or it lapsed."""
        ...

    async def list(self) -> list[LeaseRecord]: ...

    async def remaining(self, record: LeaseRecord) -> float | None:
        """Seconds until it lapses without a renewal; None: lapsed."""
        ...

    async def renew(self, record: LeaseRecord) -> float | None:
        """One keep-alive: it lives its ttl from now. The seconds it has; None: lapsed."""
        ...

    async def release(self, record: LeaseRecord) -> None:
        """Ends it now (its key goes, as at expiry). Ending a lapsed lease is no error."""
        ...


class EtcdLeaseStore:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        client = self._store.client
        with etcd_errors("grant a lease"):
            granted = await client.lease(record.ttl_seconds)
        stored = LeaseRecord()
        stored.CopyFrom(record)
        stored.etcd_lease = granted.id
        try:
            await self._store.put_record(LEASES, record.lease_id, stored, lease=granted.id)
        except BaseException:
            await self._revoke(granted.id)
            raise
        return stored

    async def get(self, lease_id: str) -> LeaseRecord | None:
        return await self._store.get_record(LEASES, lease_id, LeaseRecord)

    async def list(self) -> list[LeaseRecord]:
        return await self._store.list_records(LEASES, LeaseRecord)

    async def remaining(self, record: LeaseRecord) -> float | None:
        with etcd_errors(f"read lease {record.lease_id}"):
            info = await self._store.client.get_lease_info(record.etcd_lease, keys=False)
        # An expired or revoked lease answers TTL -1.
        return float(info.TTL) if info is not None and info.TTL > 0 else None

    async def renew(self, record: LeaseRecord) -> float | None:
        with etcd_errors(f"renew lease {record.lease_id}"):
            reply = await self._store.client.refresh_lease(record.etcd_lease)
        # etcd answers a keep-alive of an unknown (expired, revoked) lease with TTL 0.
        return float(reply.TTL) if reply is not None and reply.TTL > 0 else None

    async def release(self, record: LeaseRecord) -> None:
        await self._revoke(record.etcd_lease)

    async def _revoke(self, etcd_lease: int) -> None:
        try:
            with etcd_errors("revoke a lease"):
                await self._store.client.revoke_lease(etcd_lease)
        except Internal as err:
            if not lease_gone(err):
                raise



class InMemoryLeaseStore:
    """Tests' store (with a clock they move), and a gateway's without etcd."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[str, tuple[LeaseRecord, float]] = {}
        self._next = 1

    async def create(self, record: LeaseRecord) -> LeaseRecord:
        stored = LeaseRecord()
        stored.CopyFrom(record)
        stored.etcd_lease = self._next
        self._next += 1
        self._leases[record.lease_id] = (stored, self._clock() + record.ttl_seconds)
        return stored

    async def get(self, lease_id: str) -> LeaseRecord | None:
        self._lapse()
        held = self._leases.get(lease_id)
        return held[0] if held else None

    async def list(self) -> list[LeaseRecord]:
        self._lapse()
        return [record for record, _ in self._leases.values()]

    async def remaining(self, record: LeaseRecord) -> float | None:
        self._lapse()
        held = self._leases.get(record.lease_id)
        return held[1] - self._clock() if held else None

    async def renew(self, record: LeaseRecord) -> float | None:
        self._lapse()
        held = self._leases.get(record.lease_id)
        if held is None:
            return None
        self._leases[record.lease_id] = (held[0], self._clock() + held[0].ttl_seconds)
        return float(held[0].ttl_seconds)

    async def release(self, record: LeaseRecord) -> None:
        self._leases.pop(record.lease_id, None)

    def _lapse(self) -> None:
        now = self._clock()
        for lease_id in [i for i, (_, until) in self._leases.items() if until <= now]:
            del self._leases[lease_id]
