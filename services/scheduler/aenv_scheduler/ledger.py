"""The active scheduler's reservations, kept in etcd as well as in memory.

Only the leader places (architecture.md, Cluster state). Its reservations are what the nodes
have not accounted for yet; were they only in its memory, a standby taking over would see those
nodes emptier than they are and over-place them. So each placement is written under
`<prefix>/scheduler/reservations/<sandbox_id>` before the gateway hears of it, in a transaction
that holds only while this instance still owns the leader key: a deposed leader (its lease
expired, a successor elected) cannot place any more. A successor reads them all when it
takes over. Placements arriving together are written together; ended reservations are
deleted in batches, off the placement path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aenv.scheduler.v1 import scheduler_pb2
from aenv_common import errors
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.store import etcd_errors
from aenv_scheduler.reservations import Reservation

log = logging.getLogger(__name__)

StoredReservation = scheduler_pb2.Reservation
# etcd's default limit of operations in one transaction is 128.
MAX_TXN_OPS = 100


class NotLeader(errors.Unavailable):
    """This scheduler does not (or no longer) hold the leader key: ask another replica."""


class ReservationLedger:
    def __init__(
        self, store: ClusterStore, identity: str, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._identity = identity.encode()
        self._wall_clock = wall_clock
        self._prefix = store.keys.prefix.encode() + b"/scheduler/reservations/"
        self._ended: set[str] = set()
        # Placements to write, each with its caller's future; one writer task at a time.
        self._unwritten: list[tuple[StoredReservation, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    def _key(self, sandbox_id: str) -> bytes:
        return self._prefix + sandbox_id.encode()

    async def record(self, reservation: Reservation, ttl_left_s: float) -> None:
        """Writes the placement while this instance leads. Placements waiting while a write is
        in flight go together in the next transaction (group commit): one round trip to etcd
        for a burst, none added to a lone placement.

        :raise NotLeader: another instance leads now (the caller drops the placement).
        """
        self._ended.discard(reservation.sandbox_id)
        stored = StoredReservation(
            sandbox_id=reservation.sandbox_id,
            node_id=reservation.node_id,
            resources=reservation.resources,
            expires_at_unix_ms=int((self._wall_clock() + ttl_left_s) * 1000),
        )
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._unwritten.append((stored, written))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_unwritten(), name="ledger-writer")
        await written

    async def _write_unwritten(self) -> None:
        while self._unwritten:
            batch = self._unwritten[:MAX_TXN_OPS]
            del self._unwritten[:MAX_TXN_OPS]
            outcome: errors.AenvError | None = None
            try:
                if not await self._put_while_leading([stored for stored, _ in batch]):
                    outcome = NotLeader(
                        "this scheduler lost its leadership; another replica places now"
                    )
            except errors.AenvError as err:
                outcome = err
            for _, written in batch:
                if written.done():
                    continue  # its caller went away
                if outcome is None:
                    written.set_result(None)
                else:
                    written.set_exception(outcome)

    async def _put_while_leading(self, batch: list[StoredReservation]) -> bool:
        client = self._store.client
        txn = client.transactions
        leader_key = self._store.keys.scheduler_leader
        with etcd_errors("reservation write"):
            held, _ = await client.transaction(
                compare=[txn.value(leader_key) == self._identity],
                success=[
                    txn.put(self._key(sandbox_id), stored.SerializeToString())
                    # A Schedule sent again may be in the same batch: etcd refuses a key twice.
                    for sandbox_id, stored in {s.sandbox_id: s for s in batch}.items()
                ],
                failure=[],
            )
        return bool(held)

    def ended(self, sandbox_id: str) -> None:
        """A reservation ended (settled, expired, dropped): deleted at the next flush."""
        self._ended.add(sandbox_id)

    async def flush(self) -> None:
        ended, self._ended = sorted(self._ended), set()
        client = self._store.client
        txn = client.transactions
        for start in range(0, len(ended), MAX_TXN_OPS):
            batch = ended[start : start + MAX_TXN_OPS]
            try:
                with etcd_errors("reservation delete"):
                    await client.transaction(
                        compare=[], success=[txn.delete(self._key(i)) for i in batch], failure=[]
                    )
            except errors.AenvError:
                self._ended.update(ended[start:])  # kept for the next flush
                raise

    async def load(self) -> list[tuple[StoredReservation, float]]:
        """Every stored reservation still due, with the seconds left of its TTL; expired ones
        are deleted."""
        with etcd_errors("reservation read"):
            result = await self._store.client.get_prefix(self._prefix)
        now = self._wall_clock()
        live: list[tuple[StoredReservation, float]] = []
        for kv in result:
            stored = StoredReservation.FromString(kv.value)
            left = stored.expires_at_unix_ms / 1000 - now
            if left > 0:
                live.append((stored, left))
            else:
                self._ended.add(stored.sandbox_id)
        return live

    async def flush_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(errors.AenvError):
                await self.flush()
