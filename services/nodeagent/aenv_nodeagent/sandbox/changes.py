"""Changes to a running sandbox that keep its VM as it is: when it ends, and its egress rules."""

from __future__ import annotations

import time

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_common.limits import MAX_TIMEOUT_S
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.kill import Kills
from aenv_nodeagent.sandbox.records import egress_policy, timestamp

UPDATED = cluster_pb2.SANDBOX_EVENT_TYPE_UPDATED


class Changes:
    """A running sandbox's timeout and network policy, changed and published."""

    def __init__(self, wing: WingContext, kills: Kills) -> None:
        self._registry = wing.registry
        self._events = wing.events
        self._network = wing.network
        self._kills = kills

    async def set_timeout(
        self, sandbox_id: str, timeout_s: int, *, extend_only: bool = False
    ) -> cluster_pb2.SandboxRecord:
        """The sandbox ends `timeout_s` from now; 0 ends it now, its timeout action (kill, or
        pause) run at once (kill.py `expire_now`). `extend_only` never shortens it.

        :raise InvalidArgument: out of range. :raise NotFound: no such running sandbox.
        """
        if not 0 <= timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"timeout must be between 0 and {MAX_TIMEOUT_S} seconds")
        sandbox = self._registry.get(sandbox_id)
        end = time.time() + timeout_s
        if extend_only and end <= sandbox.record.end_at.ToNanoseconds() / 1e9:
            return sandbox.record
        if timeout_s == 0:
            return await self._kills.expire_now(sandbox)
        sandbox.record.end_at.CopyFrom(timestamp(end))
        await self._events.publish(sandbox.record, UPDATED, detail=f"timeout {timeout_s} s")
        return sandbox.record

    async def update_network(
        self, sandbox_id: str, network: cluster_pb2.NetworkPolicy
    ) -> cluster_pb2.SandboxRecord:
        """New egress rules for a running sandbox; how its ports are reached stays. All or
        nothing: the policy is validated whole before the slot changes, and a record that cannot
        be stored puts the old rules back, so the old policy stays applied and recorded.

        :raise InvalidArgument: an entry of the new policy. :raise NotFound: no such sandbox.
        """
        sandbox = self._registry.get(sandbox_id)
        current = sandbox.record.network
        updated = cluster_pb2.NetworkPolicy()
        updated.CopyFrom(network)
        updated.private_traffic = current.private_traffic
        updated.mask_request_host = current.mask_request_host
        updated.https_ports[:] = current.https_ports
        owner = sandbox.record.owner_key_id
        policy, previous = egress_policy(updated, owner), egress_policy(current, owner)
        await self._network.update_policy(sandbox.slot, policy)
        record = cluster_pb2.SandboxRecord()
        record.CopyFrom(sandbox.record)
        record.network.CopyFrom(updated)
        try:
            await self._events.publish(record, UPDATED, detail="network updated")
        except BaseException:
            await self._network.update_policy(sandbox.slot, previous)
            raise
        sandbox.record.network.CopyFrom(updated)
        return sandbox.record
