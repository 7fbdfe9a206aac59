"""Idempotency keys in etcd (`idempotency-keys/<caller>.<key>`), shared by every gateway.

A claim is created only where the key is absent, in one transaction, so of two replicas
receiving one key at once exactly one creates. An in-flight claim (empty value) is bound to its
gateway's lease, kept alive while the gateway runs: a gateway that dies takes its claims with
it within `claim_ttl_s`, and another call of the key creates. A finished key holds the sandbox
record, replaced only at the claim's revision (a claim that expired meanwhile is not
overwritten), under a lease of the TTL shared by the keys finished in the same tenth of it
(a key lives between the TTL and 1.1 times it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import etcd_errors
from aenv_gateway.core.idempotency import Claim, Held, Record

log = logging.getLogger(__name__)

IDEMPOTENCY_KEYS = "idempotency-keys"


class _KeptLease:
    """This gateway's lease for its claims in flight: granted on first use, kept alive every
    third of its TTL, granted anew when lost (an etcd outage longer than the TTL)."""

    def __init__(self, store: ClusterStore, ttl_s: int) -> None:
        self._store = store
        self._ttl = ttl_s
        self._id: int | None = None
        self._lock = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None

    async def id(self) -> int:
        async with self._lock:
            if self._id is None:
                with etcd_errors("grant idempotency claim lease"):
                    self._id = (await self._store.client.lease(self._ttl)).id
            if self._keeper is None:
                self._keeper = asyncio.create_task(self._keep(), name="idempotency-lease")
            return self._id

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            lease_id = self._id
            if lease_id is None:
                continue
            try:
                with etcd_errors("refresh idempotency claim lease"):
                    reply = await self._store.client.refresh_lease(lease_id)
            except errors.AenvError as err:
                log.warning("idempotency claim lease not refreshed", extra={"error": err.message})
                continue
            if reply is None or reply.TTL <= 0:  # expired: its claims are gone
                log.warning("idempotency claim lease lost", extra={"lease_id": lease_id})
                self._id = None

    async def close(self, *, revoke: bool = True) -> None:
        """Stops keeping it alive; `revoke` drops the claims in flight at once (else they go
        with the TTL, as when the gateway dies)."""
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if revoke and self._id is not None:
            with contextlib.suppress(errors.AenvError), etcd_errors("revoke claim lease"):
                await self._store.client.revoke_lease(self._id)
        self._id = None


class EtcdKeyClaims:
    def __init__(
        self,
        store: ClusterStore,
        ttl_s: float,
        claim_ttl_s: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._ttl = ttl_s
        self._clock = clock
        self._claims = _KeptLease(store, claim_ttl_s)
        self._done_lease: tuple[int, float] | None = None  # (lease id, when granted)
        self._done_lock = asyncio.Lock()

    def _key(self, name: str) -> bytes:
        return self._store.keys.record(IDEMPOTENCY_KEYS, name)

    async def claim(self, name: str) -> Claim:
        key, lease = self._key(name), await self._claims.id()
        txn = self._store.client.transactions
        with etcd_errors(f"claim idempotency key {name}"):
            claimed, responses = await self._store.client.transaction(
                compare=[txn.version(key) == 0],
                success=[txn.put(key, b"", lease)],
                failure=[txn.get(key)],
            )
        if claimed:
            return Held(name, responses[0].response_put.header.revision)
        found = responses[0]
        if not found:
            return None  # gone since the compare: ask again
        record = decode(cluster_pb2.SandboxRecord, found[0][0])
        return record if record.sandbox_id else None

    async def finish(self, held: Held, record: Record) -> None:
        key, lease = self._key(held.name), await self._lease_for_done()
        txn = self._store.client.transactions
        with etcd_errors(f"finish idempotency key {held.name}"):
            kept, _ = await self._store.client.transaction(
                compare=[txn.mod(key) == held.revision],
                success=[txn.put(key, encode(record), lease)],
                failure=[],
            )
        if not kept:
            log.warning(
                "idempotency claim expired before its create answered",
                extra={"sandbox_id": record.sandbox_id},
            )

    async def release(self, held: Held) -> None:
        key = self._key(held.name)
        txn = self._store.client.transactions
        with etcd_errors(f"release idempotency key {held.name}"):
            await self._store.client.transaction(
                compare=[txn.mod(key) == held.revision], success=[txn.delete(key)], failure=[]
            )

    async def _lease_for_done(self) -> int:
        """One lease per tenth of the TTL, not one per key."""
        async with self._done_lock:
            now = self._clock()
            if self._done_lease is None or now - self._done_lease[1] >= self._ttl / 10:
                with etcd_errors("grant idempotency key lease"):
                    lease = await self._store.client.lease(math.ceil(self._ttl * 1.1))
                self._done_lease = (lease.id, now)
            return self._done_lease[0]

    async def close(self, *, revoke: bool = True) -> None:
        await self._claims.close(revoke=revoke)
