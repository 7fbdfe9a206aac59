"""Active/standby leadership over one etcd key: lease + create-if-absent txn + watch.

The leader holds the key under its lease and keeps the lease alive; standbys wait for the key to
disappear (watch, re-checked every TTL) and then campaign. Work that must run on one instance
only runs inside `leading()`, and is cancelled as soon as the lease is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from aenv_common import errors
from aenv_common.cluster.store import ClusterStore, etcd_errors

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0


class LeaderElection:
    def __init__(
        self,
        store: ClusterStore,
        key: bytes,
        identity: str,
        leading: Callable[[], Coroutine[Any, Any, None]],
        ttl: int = 5,
    ) -> None:
        self._store = store
        self._key = key
        self._identity = identity
        self._leading = leading
        self._ttl = ttl
        self._task: asyncio.Task[None] | None = None
        self._lease_id: int | None = None
        self.is_leader = False
        self.terms = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="leader-election")

    async def stop(self) -> None:
        """Steps down: cancels the leader work and revokes the lease so a standby takes over
        at once instead of after the TTL."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._release()

    async def _run(self) -> None:
        while True:
            try:
                if await self._campaign():
                    await self._lead()
                else:
                    await self._wait_for_vacancy()
            except errors.AenvError as err:
                log.warning("leader election round failed", extra={"error": err.message})
                await asyncio.sleep(RETRY_SECONDS)
            finally:
                self.is_leader = False
            await self._release()

    async def _campaign(self) -> bool:
        client = self._store.client
        txn = client.transactions
        with etcd_errors("leader campaign"):
            lease = await client.lease(self._ttl)
            self._lease_id = lease.id
            won, _ = await client.transaction(
                compare=[txn.version(self._key) == 0],
                success=[txn.put(self._key, self._identity.encode(), lease.id)],
                failure=[],
            )
        return bool(won)

    async def _lead(self) -> None:
        self.is_leader = True
        self.terms += 1
        log.info("became leader", extra={"identity": self._identity, "key": self._key.decode()})
        work = asyncio.create_task(self._leading(), name="leader-work")
        try:
            await self._keep_lease_alive()
        finally:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            log.info("leadership ended", extra={"identity": self._identity})

    async def _keep_lease_alive(self) -> None:
        assert self._lease_id is not None
        while True:
            await asyncio.sleep(self._ttl / 3)
            with etcd_errors("leader lease refresh"):
                reply = await self._store.client.refresh_lease(self._lease_id)
            if reply is None or reply.TTL <= 0:
                return

    async def _wait_for_vacancy(self) -> None:
        """Returns when the leader key was deleted, or after one TTL to campaign again anyway
        (covers a missed event)."""
        await self._release()
        client = self._store.client
        with etcd_errors("leader watch"):
            watch = await client.watch(self._key)
            try:
                async with asyncio.timeout(self._ttl):
                    async for event in watch:
                        if event.kind == "DELETE":
                            return
            except TimeoutError:
                return
            finally:
                await watch.cancel()

    async def _release(self) -> None:
        if self._lease_id is None:
            return
        lease_id, self._lease_id = self._lease_id, None
        with contextlib.suppress(errors.AenvError), etcd_errors("leader lease revoke"):
            await self._store.client.revoke_lease(lease_id)
