"""Experiment leases and bulk operations (docs/leases.md).

A trainer takes a lease and creates its sandboxes under it; while it lives it renews the lease.
If it crashes, or loses its network, the lease lapses and every sandbox under it is killed (or
paused) within seconds, on every node:

    async with await client.create_lease(30) as lease:      # renewed every 10 s meanwhile
        sandboxes = await client.create_sandboxes("base", count=64, lease_id=lease.lease_id)
        ...
    # released on exit: its sandboxes end now

Bulk operations end every sandbox of the key a filter matches, with one outcome per sandbox:

    await client.kill_sandboxes(sandbox_filter(metadata={"run": "r7"}))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Literal, Self

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_client.connection import Connection
from aenv_client.errors import AenvError, NotFound

log = logging.getLogger(__name__)

_ACTIONS = {"kill": cluster_pb2.LEASE_EXPIRY_ACTION_KILL,
            "pause": cluster_pb2.LEASE_EXPIRY_ACTION_PAUSE}
# A renewal that failed is tried again after this long (and waits at least this long).
RETRY_S = 1.0
# The outcomes after which a sandbox is no longer this client's to call.
_ENDED = frozenset({"OK", "NOT_FOUND"})


def sandbox_filter(
    *,
    metadata: Mapping[str, str] | None = None,
    states: Sequence[cluster_pb2.SandboxState] = (),
    template_id: str = "",
    lease_id: str = "",
    every: bool = False,
) -> gateway_pb2.SandboxFilter:
    """Which of the key's sandboxes a bulk call acts on: every given part must match. `every`
    (the API's `all`) is required to mean every sandbox of the key with no other part."""
    return gateway_pb2.SandboxFilter(
        metadata=dict(metadata or {}), states=states, template_id=template_id,
        lease_id=lease_id, all=every)


class LeaseCalls(Connection):
    async def create_lease(
        self,
        ttl_s: int,
        *,
        on_expiry: Literal["kill", "pause"] = "kill",
        name: str = "",
        metadata: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Lease:
        """A lease of `ttl_s` (5..3600) seconds. Use it as `async with` to renew it in the
        background (every ttl/3) and release it on exit; or renew and release it yourself."""
        request = gateway_pb2.CreateLeaseRequest(
            ttl_seconds=ttl_s, on_expiry=_ACTIONS[on_expiry], name=name,
            metadata=dict(metadata or {}))
        # Not sent twice: a second lease would be a second record nobody renews (harmless: it
        # lapses alone), but the caller would hold the wrong one.
        reply: gateway_pb2.CreateLeaseResponse = await self._call(
            self._stub.CreateLease, request, timeout_s)
        return Lease(self, reply.lease)

    async def renew_lease(self, lease_id: str, *, timeout_s: float | None = None) -> float:
        """When the lease now lapses unless renewed again (unix seconds).

        :raise NotFound: it lapsed already: its sandboxes are being ended.
        """
        request = gateway_pb2.RenewLeaseRequest(lease_id=lease_id)
        reply: gateway_pb2.RenewLeaseResponse = await self._call(
            self._stub.RenewLease, request, timeout_s, retry=True)
        return float(reply.expires_at.ToNanoseconds() / 1e9)

    async def get_lease(
        self, lease_id: str, *, timeout_s: float | None = None
    ) -> gateway_pb2.GetLeaseResponse:
        """Its record, when it lapses unless renewed, and how many sandboxes live under it."""
        request = gateway_pb2.GetLeaseRequest(lease_id=lease_id)
        reply: gateway_pb2.GetLeaseResponse = await self._call(
            self._stub.GetLease, request, timeout_s, retry=True)
        return reply

    async def list_leases(
        self, *, timeout_s: float | None = None
    ) -> list[gateway_pb2.GetLeaseResponse]:
        reply: gateway_pb2.ListLeasesResponse = await self._call(
            self._stub.ListLeases, gateway_pb2.ListLeasesRequest(), timeout_s, retry=True)
        return list(reply.leases)

    async def release_lease(self, lease_id: str, *, timeout_s: float | None = None) -> None:
        """Ends the lease now: its sandboxes end as if it had lapsed."""
        await self._call(self._stub.ReleaseLease,
                         gateway_pb2.ReleaseLeaseRequest(lease_id=lease_id), timeout_s)

    async def kill_sandboxes(
        self, sandbox_filter: gateway_pb2.SandboxFilter, *, timeout_s: float | None = None
    ) -> list[gateway_pb2.SandboxOutcome]:
        """Kills every sandbox of the key the filter matches, on every node: one outcome per
        sandbox (`code` "OK" or the status name of its failure)."""
        request = gateway_pb2.KillSandboxesRequest(filter=sandbox_filter)
        reply: gateway_pb2.KillSandboxesResponse = await self._call(
            self._stub.KillSandboxes, request, timeout_s)
        self._alive.difference_update(o.sandbox_id for o in reply.outcomes if o.code in _ENDED)
        return list(reply.outcomes)

    async def pause_sandboxes(
        self, sandbox_filter: gateway_pb2.SandboxFilter, *, filesystem_only: bool = False,
        timeout_s: float | None = None,
    ) -> list[gateway_pb2.SandboxOutcome]:
        """Pauses every running sandbox of the key the filter matches: one outcome each."""
        request = gateway_pb2.PauseSandboxesRequest(
            filter=sandbox_filter, filesystem_only=filesystem_only)
        reply: gateway_pb2.PauseSandboxesResponse = await self._call(
            self._stub.PauseSandboxes, request, timeout_s)
        return list(reply.outcomes)


class Lease:
    """A lease held through a client. `async with` renews it every ttl/3 in the background and
    releases it on exit. A renewal that fails (the gateway slow or unreachable) is tried again
    until the lease's time is up; one answered NOT_FOUND means the lease lapsed: `lapsed` is set
    and renewing stops (its sandboxes are being ended)."""

    def __init__(self, client: LeaseCalls, record: cluster_pb2.LeaseRecord) -> None:
        self._client = client
        self.record = record
        self.lapsed = asyncio.Event()
        self._renewing: asyncio.Task[None] | None = None

    @property
    def lease_id(self) -> str:
        return self.record.lease_id

    async def renew(self) -> float:
        try:
            return await self._client.renew_lease(self.lease_id)
        except NotFound:
            self.lapsed.set()
            raise

    async def release(self) -> None:
        """Ends it now (a lease that lapsed already is no error)."""
        await self._stop()
        with contextlib.suppress(NotFound):
            await self._client.release_lease(self.lease_id)
        self.lapsed.set()

    async def __aenter__(self) -> Self:
        self._renewing = asyncio.create_task(self._renew_every(self.record.ttl_seconds / 3))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()

    async def _renew_every(self, interval_s: float) -> None:
        """Every `interval_s` after the last renewal, until the lease lapses. A renewal waits
        for its answer as long as the lease still lives (a slow gateway is not a dead one),
        and one that failed is tried again within a second, not a tick later."""
        ttl_s = float(self.record.ttl_seconds)
        expires = time.monotonic() + ttl_s
        while not self.lapsed.is_set():
            await asyncio.sleep(interval_s)
            while True:
                asked = time.monotonic()
                try:
                    await self._client.renew_lease(
                        self.lease_id, timeout_s=max(expires - asked, RETRY_S))
                except NotFound:
                    log.warning("lease lapsed", extra={"lease_id": self.lease_id})
                    self.lapsed.set()
                    return
                except AenvError as err:
                    log.warning("lease renewal failed; trying again",
                                extra={"lease_id": self.lease_id, "error": err.message})
                    await asyncio.sleep(RETRY_S)
                    continue
                # It lives its ttl from when the gateway renewed it: after it was asked.
                expires = asked + ttl_s
                break

    async def _stop(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
            self._renewing = None
