"""The reaper's view of this node's sandboxes: the wing's own kill and pause (each announcing its
event), and the one change the wing has no operation for, a paused sandbox leaving its lapsed
lease."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_nodeagent.leases.orphans import StoredOrphans
from aenv_nodeagent.sandbox.records import SandboxRecords
from aenv_nodeagent.sandbox.wing import SandboxWing


class WingSandboxes:
    def __init__(self, sandboxes: SandboxWing, records: SandboxRecords) -> None:
        self._sandboxes = sandboxes
        self._records = records
        context = sandboxes.context
        # Paused sandboxes of gone nodes need the cluster's records (a store, not a fake).
        self.orphans: StoredOrphans | None = (
            StoredOrphans(records, context.registry.node_id, context.events,
                          context.persistence)
            if isinstance(records, ClusterStore) else None)

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        return self._sandboxes.registry.records()

    async def kill(self, sandbox_id: str, *, cause: cluster_pb2.DeathCause, detail: str) -> None:
        await self._sandboxes.kills.kill(sandbox_id, cause=cause, detail=detail)

    async def pause(self, sandbox_id: str, *, detail: str) -> None:
        await self._sandboxes.pauses.pause(sandbox_id, detail=detail)

    async def detach(self, sandbox_id: str, lease_id: str) -> None:
        """:raise Conflict: another operation holds it (the next reconcile tries again)."""
        registry = self._sandboxes.registry
        with registry.exclusive(sandbox_id):
            paused = registry.paused(sandbox_id)
            if paused is None or paused.record.lease_id != lease_id:
                return  # resumed or killed meanwhile, or detached already
            paused.record.lease_id = ""
            paused.record.ClearField("lease_on_expiry")
            # Its directory's record first: a restart takes it back as it is now.
            paused.save()
            await self._records.put_sandbox(paused.record)
