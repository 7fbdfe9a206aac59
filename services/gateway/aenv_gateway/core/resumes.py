"""Resumes of paused sandboxes (connect, legacy `/resume`, traffic's auto-resume): one at a time
per sandbox, and never a memory resume of a guest paused wedged."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.cluster.directory import Located, SandboxDirectory

# Sets a sandbox's time to live from now (SandboxService.set_timeout).
SetTimeout = Callable[[str, int], Awaitable[cluster_pb2.SandboxRecord]]


class GuestUnresponsive(Conflict):
    """A memory resume of a sandbox paused while its guest agent did not answer (the SDK raises
    GuestUnresponsiveException and asks for on_resume="reboot")."""

    error_code = "sandbox_snapshot_guest_agent_unresponsive"


@dataclass(frozen=True)
class Connected:
    record: cluster_pb2.SandboxRecord
    # True when the sandbox was paused and has been resumed (HTTP 201 instead of 200).
    resumed: bool


class Resumes:
    def __init__(
        self, directory: SandboxDirectory, nodeagents: NodeAgentClients,
        set_timeout: SetTimeout, clock: Callable[[], float],
    ) -> None:
        self._directory = directory
        self._nodeagents = nodeagents
        self._set_timeout = set_timeout
        self._clock = clock
        self._resuming: dict[str, asyncio.Future[cluster_pb2.SandboxRecord]] = {}

    async def resume(
        self, located: Located, timeout_s: int | None, reboot: bool = False
    ) -> Connected:
        """Concurrent callers wait for the resume in flight (and then get the longer time to
        live they asked for, if any).

        :raise GuestUnresponsive: paused wedged, and asked to keep its memory."""
        sandbox_id = located.record.sandbox_id
        if located.record.envd_unresponsive_at_pause and not reboot:
            raise GuestUnresponsive(
                f'sandbox "{sandbox_id}" was paused while its guest agent did not answer: its '
                "memory would bring the wedged agent back, resume it without memory")
        pending = self._resuming.get(sandbox_id)
        if pending is None:
            pending = asyncio.ensure_future(self._resume_once(located, timeout_s, reboot))
            self._resuming[sandbox_id] = pending
            pending.add_done_callback(lambda _: self._resuming.pop(sandbox_id, None))
            return Connected(await asyncio.shield(pending), resumed=True)
        record = await asyncio.shield(pending)
        if timeout_s is not None and self._clock() + timeout_s > record.end_at.seconds:
            record = await self._set_timeout(sandbox_id, timeout_s)
        return Connected(record, resumed=True)

    async def _resume_once(
        self, located: Located, timeout_s: int | None, reboot: bool
    ) -> cluster_pb2.SandboxRecord:
        record = await self._nodeagents.resume(
            located.owner.nodeagent_address, located.record.sandbox_id, timeout_s or 0, reboot
        )
        self._directory.remember(record, located.owner)
        return record
