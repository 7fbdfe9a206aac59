"""A sandbox's metrics as its node agent samples them: the history of one, and the newest
sample of many (one call per owning node)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, InvalidArgument
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.cluster.directory import SandboxDirectory
from aenv_gateway.core.listing import VISIBLE_STATES
from aenv_gateway.core.sandboxes import SandboxService

log = logging.getLogger(__name__)


class SandboxMetrics:
    def __init__(
        self, sandboxes: SandboxService, directory: SandboxDirectory,
        nodeagents: NodeAgentClients,
    ) -> None:
        self._sandboxes = sandboxes
        self._directory = directory
        self._nodeagents = nodeagents

    async def history(
        self, sandbox_id: str, start: int | None = None, end: int | None = None
    ) -> Sequence[nodeagent_pb2.SandboxMetric]:
        """The guest's CPU, memory and disk figures sampled by its node agent, oldest first,
        within [start, end] (unix seconds). Paused sandboxes answer what was kept (none once
        their node is gone).

        :raise InvalidArgument: a negative bound, or start after end.
        :raise NotFound: no such sandbox visible to clients.
        """
        if (start is not None and start < 0) or (end is not None and end < 0):
            raise InvalidArgument("start and end must not be negative (unix seconds)")
        if start is not None and end is not None and start > end:
            raise InvalidArgument("start must not be after end")
        located = self._sandboxes.observed(sandbox_id)
        if located is None:
            return []
        return await self._nodeagents.metrics(
            located.owner.nodeagent_address, sandbox_id, start, end
        )

    async def latest(
        self, sandbox_ids: Sequence[str]
    ) -> dict[str, nodeagent_pb2.SandboxMetric]:
        """The newest sample of each sandbox, one call per owning node. Unknown sandboxes, ones
        without a sample and ones whose node fails are left out: one node must not fail all."""
        by_node: dict[str, list[str]] = {}
        for sandbox_id in sandbox_ids:
            located = self._directory.find(sandbox_id)
            if located is not None and located.record.state in VISIBLE_STATES:
                by_node.setdefault(located.owner.nodeagent_address, []).append(sandbox_id)
        answers = await asyncio.gather(
            *(self._nodeagents.latest_metrics(address, ids) for address, ids in by_node.items()),
            return_exceptions=True,
        )
        found: dict[str, nodeagent_pb2.SandboxMetric] = {}
        for address, answer in zip(by_node, answers, strict=True):
            if isinstance(answer, AenvError):
                log.warning("batch metrics of a node failed",
                            extra={"nodeagent": address, "error": answer.message})
            elif isinstance(answer, BaseException):
                raise answer
            else:
                found.update(answer)
        return {sid: found[sid] for sid in sandbox_ids if sid in found}
