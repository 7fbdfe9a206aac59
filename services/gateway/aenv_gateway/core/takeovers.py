"""Paused sandboxes whose node is gone, their state kept in snapstore: moved to a live node on
first use.

The scheduler picks the node as for a create of the sandbox's base template with its resources;
that node's agent pulls the state and claims the record (NodeAgentService.TakeOverSandbox), and
the sandbox then lives there like any other. Concurrent requests for the same sandbox share one
move. A kill needs no move: any live node drops the stored state and the record.
"""

from __future__ import annotations

import asyncio
import logging
import random

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unavailable
from aenv_gateway.cluster.clients import NodeAgentClients, SchedulerClient
from aenv_gateway.cluster.directory import Located, Owner, SandboxDirectory

log = logging.getLogger(__name__)


class Handover:
    def __init__(
        self, directory: SandboxDirectory, scheduler: SchedulerClient,
        nodeagents: NodeAgentClients,
    ) -> None:
        self._directory = directory
        self._scheduler = scheduler
        self._nodeagents = nodeagents
        self._moving: dict[str, asyncio.Future[Located]] = {}

    def stored_orphan(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        """The record of a paused sandbox whose node is gone and whose state is in snapstore."""
        record = self._directory.orphan(sandbox_id)
        if record is None or record.state != cluster_pb2.SANDBOX_STATE_PAUSED:
            return None
        return record if record.paused_image else None

    async def take_over(self, record: cluster_pb2.SandboxRecord) -> Located:
        sandbox_id = record.sandbox_id
        moving = self._moving.get(sandbox_id)
        if moving is None:
            moving = asyncio.ensure_future(self._move(record))
            self._moving[sandbox_id] = moving
            moving.add_done_callback(lambda _: self._moving.pop(sandbox_id, None))
        return await asyncio.shield(moving)

    async def _move(self, record: cluster_pb2.SandboxRecord) -> Located:
        spec = cluster_pb2.SandboxSpec(
            sandbox_id=record.sandbox_id,
            template_id=record.base_template_id or record.template_id,
            resources=record.resources,
        )
        placement = await self._scheduler.schedule(spec)
        taken = await self._nodeagents.take_over(placement.nodeagent_address, record.sandbox_id)
        if taken is None:
            raise Unavailable(f'node "{placement.node_id}" did not take "{record.sandbox_id}" over')
        owner = Owner(placement.node_id, placement.nodeagent_address, placement.proxy_address)
        self._directory.remember(taken, owner)
        log.warning("paused sandbox moved off a lost node", extra={
            "sandbox_id": record.sandbox_id, "from_node": record.node_id,
            "to_node": placement.node_id})
        return Located(taken, owner)

    async def discard(self, record: cluster_pb2.SandboxRecord) -> None:
        owners = self._directory.live_owners()
        if not owners:
            raise Unavailable("no live node can drop the sandbox's stored state")
        owner = random.choice(owners)  # any will do: it only talks to etcd and snapstore
        await self._nodeagents.take_over(owner.nodeagent_address, record.sandbox_id, discard=True)
