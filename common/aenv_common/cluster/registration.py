"""A node agent's presence in the cluster: its NodeRecord, bound to a lease.

While the agent is alive it refreshes the lease and rewrites its record (fresh heartbeat time and
load figures) every TTL/3. If the agent dies or hangs, etcd deletes the record when the lease
expires, and the scheduler leader marks the node's sandboxes lost. If the lease is lost while the
agent still runs (etcd restart, long pause), the agent registers again under a new lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster.store import ClusterStore, etcd_errors

log = logging.getLogger(__name__)

# Returns the node's current record (capacity, allocation, cached templates...).
RecordSource = Callable[[], cluster_pb2.NodeRecord]


class NodeRegistration:
    def __init__(self, store: ClusterStore, current_record: RecordSource, ttl: int = 10) -> None:
        self._store = store
        self._current_record = current_record
        self._ttl = ttl
        self._lease_id: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.registrations = 0

    @property
    def lease_id(self) -> int | None:
        return self._lease_id

    async def start(self) -> None:
        """Registers (raises Unavailable if etcd is down), then heartbeats in the background."""
        await self._register()
        self._task = asyncio.create_task(self._heartbeat_loop(), name="node-heartbeat")

    async def stop(self, *, revoke: bool = True) -> None:
        """Stops heartbeating. `revoke=True` (clean shutdown) deletes the record at once;
        `revoke=False` leaves it to expire with the lease, as after a crash."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if revoke and self._lease_id is not None:
            with contextlib.suppress(errors.AenvError), etcd_errors("revoke node lease"):
                await self._store.client.revoke_lease(self._lease_id)
            self._lease_id = None

    async def publish(self) -> None:
        """Writes the current record now (e.g. right after an allocation changed), instead of
        waiting for the next heartbeat."""
        if self._lease_id is None:
            raise errors.Unavailable("node is not registered")
        await self._store.put_node(self._stamped_record(), lease=self._lease_id)

    def _stamped_record(self) -> cluster_pb2.NodeRecord:
        record = cluster_pb2.NodeRecord()
        record.CopyFrom(self._current_record())
        record.heartbeat_time.FromNanoseconds(time.time_ns())
        return record

    async def _register(self) -> None:
        with etcd_errors("grant node lease"):
            lease = await self._store.client.lease(self._ttl)
        self._lease_id = lease.id
        await self.publish()
        self.registrations += 1
        log.info("node registered", extra={"lease_id": lease.id, "ttl": self._ttl})

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                if await self._lease_alive():
                    await self.publish()
                else:
                    log.warning("node lease lost; registering again", extra={"ttl": self._ttl})
                    await self._register()
            except errors.AenvError as err:
                # etcd unreachable: keep trying; if the lease expires meanwhile, the next
                # successful round sees it and registers again.
                log.warning("heartbeat failed", extra={"error": err.message})

    async def _lease_alive(self) -> bool:
        assert self._lease_id is not None
        with etcd_errors("refresh node lease"):
            reply = await self._store.client.refresh_lease(self._lease_id)
        # etcd answers a keep-alive for an unknown (expired/revoked) lease with TTL 0.
        return reply is not None and reply.TTL > 0
