"""A create on a node agent whose outcome the gateway cannot know: the node agent went away (it
crashed, restarted) before it answered, after it may have made and published the sandbox, which
its successor would then re-adopt and run unknown to any client.

The sandbox id the gateway chose is the create's idempotency key: the create is sent again with
the same spec until the node agent answers, and a node agent that has the sandbox already (made
before the crash and adopted since) answers with it, so the client gets the sandbox that was
made; each attempt ends with the window (create_retry_s, under the SDKs' own timeout). A create
that still fails, one past its deadline, or one whose caller went away is abandoned: its sandbox
is killed in the background as soon as the node agent answers, so a create a client saw fail
leaves nothing running (unless this gateway stops first: the kill is not kept anywhere else)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Conflict, DeadlineExceeded, NotFound, Unavailable
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.metrics import CREATE_RETRIES, CREATES_ABANDONED

log = logging.getLogger(__name__)

# An attempt whose connection broke: the node agent went away (a crash, a restart) after it may
# have made the sandbox, and a successor may soon answer.
_UNANSWERED = (Unavailable, DeadlineExceeded, TimeoutError)


@dataclass(frozen=True)
class CreateRetryPolicy:
    retry_s: float  # an unanswered create is sent again for this long
    interval_s: float  # between two attempts (or two kills of an abandoned create)
    abandon_s: float  # an abandoned create's sandbox is killed within this long, if ever


class NodeCreates:
    def __init__(
        self, nodeagents: NodeAgentClients, policy: CreateRetryPolicy,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._nodeagents = nodeagents
        self._policy = policy
        self._clock = clock
        self._sleep = sleep
        self._abandoned: set[asyncio.Task[None]] = set()

    async def create(
        self, address: str, spec: cluster_pb2.SandboxSpec
    ) -> cluster_pb2.SandboxRecord:
        """The sandbox made on the node agent at `address`.

        :raise AenvError: the create failed; if it may have been made, it is being killed.
        """
        try:
            return await self._nodeagents.create(address, spec)
        except Unavailable as err:
            first: AenvError = err
        except (DeadlineExceeded, asyncio.CancelledError):
            # The node agent's create outlived its deadline (it is cancelled there, but may have
            # published first), or the caller went away: past any client's patience to retry.
            self._abandon(address, spec.sandbox_id)
            raise
        try:
            return await self._again(address, spec, first)
        except BaseException:
            self._abandon(address, spec.sandbox_id)
            raise

    async def _again(
        self, address: str, spec: cluster_pb2.SandboxSpec, first: AenvError
    ) -> cluster_pb2.SandboxRecord:
        log.warning("create unanswered; sending it again", extra={
            "sandbox_id": spec.sandbox_id, "node": address, "error": first.message})
        deadline = self._clock() + self._policy.retry_s
        while self._clock() < deadline:
            await self._sleep(self._policy.interval_s)
            CREATE_RETRIES.inc()
            try:
                # Within the window: a client waiting on its own timeout must not outlast it.
                record = await asyncio.wait_for(self._nodeagents.create(address, spec),
                                                max(deadline - self._clock(), 0.001))
            except (*_UNANSWERED, Conflict):
                # Conflict: the id is ours alone, so it is our earlier attempt, still being made.
                continue
            log.info("create answered on a later attempt", extra={
                "sandbox_id": spec.sandbox_id, "node": address})
            return record
        raise Unavailable(f"the node agent did not answer the create ({first.message})")

    def _abandon(self, address: str, sandbox_id: str) -> None:
        CREATES_ABANDONED.inc()
        task = asyncio.ensure_future(self._kill_when_answered(address, sandbox_id))
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)

    async def _kill_when_answered(self, address: str, sandbox_id: str) -> None:
        deadline = self._clock() + self._policy.abandon_s
        while True:
            try:
                await self._nodeagents.kill(address, sandbox_id)
                log.warning("abandoned create's sandbox killed", extra={"sandbox_id": sandbox_id})
                return
            except NotFound:
                return  # never made, or taken back by the node's own undo
            except AenvError as err:
                if self._clock() >= deadline:
                    log.error("abandoned create's sandbox not killed", extra={
                        "sandbox_id": sandbox_id, "node": address, "error": err.message})
                    return
            await self._sleep(self._policy.interval_s)

    async def settled(self) -> None:
        """Waits for the kills of abandoned creates (tests; a stopping gateway)."""
        while self._abandoned:
            await asyncio.gather(*list(self._abandoned), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._abandoned):
            task.cancel()
        await asyncio.gather(*list(self._abandoned), return_exceptions=True)
