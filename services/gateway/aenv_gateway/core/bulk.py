"""Bulk operations: kill or pause every sandbox of the caller's key that a filter matches, in one
call, cluster-wide, with one outcome per sandbox (docs/leases.md, "Bulk operations").

The sandboxes are the gateway's view of the cluster (the watched mirror of every node's records,
plus what this gateway just made or ended), so one call reaches every node. Each sandbox is
ended as its own call would end it (SandboxService.kill / pause: a paused sandbox whose node is
gone, the administrator's kill of another key's sandbox), concurrently up to a bound, so a
filter matching thousands neither serializes nor floods the node agents; one failing sandbox
fails only its own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Internal, InvalidArgument
from aenv_gateway.core.listing import RUNNING, VISIBLE_STATES, ListQuery
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.keys.auth import ADMIN_KEY_ID

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxFilter:
    """Every given part must match; `every` (the API's `all`) is required for a filter with no
    part, so an empty body never ends every sandbox by mistake."""

    metadata: dict[str, str] = field(default_factory=dict)
    # Empty: running and paused (kill), running (pause).
    states: frozenset[int] = frozenset()
    template: str | None = None
    lease_id: str | None = None
    every: bool = False

    def check(self) -> None:
        """:raise InvalidArgument: an empty filter without `all`, or a state no client sees."""
        if not (self.metadata or self.states or self.template or self.lease_id or self.every):
            raise InvalidArgument(
                "an empty filter matches every sandbox: say all = true to mean that")
        if not self.states <= VISIBLE_STATES:
            raise InvalidArgument("states may hold only running and paused")


@dataclass(frozen=True)
class Outcome:
    sandbox_id: str
    # Why the operation failed for this sandbox (each edge names it in its protocol's
    # status); None: it succeeded.
    error: AenvError | None = None


class BulkOperations:
    def __init__(self, service: SandboxService, concurrency: int) -> None:
        self._service = service
        self._bound = asyncio.Semaphore(concurrency)

    def select(
        self, caller: str, sandbox_filter: SandboxFilter, default_states: frozenset[int]
    ) -> list[cluster_pb2.SandboxRecord]:
        """The caller's key's sandboxes (the admin key's: every key's) the filter matches,
        newest first.

        :raise InvalidArgument: the filter is malformed (SandboxFilter.check).
        """
        sandbox_filter.check()
        page = self._service.list(ListQuery(
            states=sandbox_filter.states or default_states,
            metadata=sandbox_filter.metadata, template=sandbox_filter.template,
            lease_id=sandbox_filter.lease_id))
        return [r for r in page.items if caller == ADMIN_KEY_ID or r.owner_key_id == caller]

    async def kill(self, caller: str, sandbox_filter: SandboxFilter) -> list[Outcome]:
        selected = self.select(caller, sandbox_filter, VISIBLE_STATES)
        return await self._each(selected, self._service.kill, "kill")

    async def pause(
        self, caller: str, sandbox_filter: SandboxFilter, *, keep_memory: bool = True
    ) -> list[Outcome]:
        selected = self.select(caller, sandbox_filter, frozenset({RUNNING}))

        async def pause(sandbox_id: str) -> None:
            await self._service.pause(sandbox_id, keep_memory)

        return await self._each(selected, pause, "pause")

    async def _each(
        self, selected: list[cluster_pb2.SandboxRecord],
        operation: Callable[[str], Awaitable[None]], name: str,
    ) -> list[Outcome]:
        async def one(sandbox_id: str) -> Outcome:
            async with self._bound:
                try:
                    await operation(sandbox_id)
                except AenvError as err:
                    return Outcome(sandbox_id, err)
                except Exception:
                    # A bug for this sandbox only: the others' outcomes are still answered.
                    log.exception("bulk operation failed", extra={"sandbox_id": sandbox_id,
                                                                  "operation": name})
                    return Outcome(sandbox_id, Internal(f"the {name} failed"))
            return Outcome(sandbox_id)

        outcomes = list(await asyncio.gather(*(one(r.sandbox_id) for r in selected)))
        failed = sum(1 for o in outcomes if o.error is not None)
        log.info("bulk operation", extra={"operation": name, "sandboxes": len(outcomes),
                                          "failed": failed})
        return outcomes
