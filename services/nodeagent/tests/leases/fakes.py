"""This node's sandboxes as the reaper sees them, in memory: what it did to each, in order."""

from __future__ import annotations

import asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, NotFound
from aenv_nodeagent.leases.reaper import OrphanKeeper

RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED


class FakeSandboxes:
    def __init__(self) -> None:
        self.sandboxes: dict[str, cluster_pb2.SandboxRecord] = {}
        self.done: list[tuple[str, str, str]] = []  # (what, sandbox id, detail or cause)
        self.orphans: OrphanKeeper | None = None
        # Errors the next operation on a sandbox raises (busy, etcd down).
        self.failures: dict[str, AenvError] = {}
        self.changed = asyncio.Event()

    def add(self, sandbox_id: str, lease_id: str, state: int = RUNNING,
            on_expiry: int = cluster_pb2.LEASE_EXPIRY_ACTION_UNSPECIFIED) -> None:
        """A sandbox under `lease_id`, its record keeping the lease's action `on_expiry`."""
        self.sandboxes[sandbox_id] = cluster_pb2.SandboxRecord(
            sandbox_id=sandbox_id, lease_id=lease_id, state=state,  # type: ignore[arg-type]
            lease_on_expiry=on_expiry)  # type: ignore[arg-type]

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        return list(self.sandboxes.values())

    def _check(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        if (failure := self.failures.pop(sandbox_id, None)) is not None:
            raise failure
        if sandbox_id not in self.sandboxes:
            raise NotFound(f"sandbox {sandbox_id} not found")
        return self.sandboxes[sandbox_id]

    def _did(self, what: str, sandbox_id: str, detail: str) -> None:
        self.done.append((what, sandbox_id, detail))
        self.changed.set()

    async def kill(self, sandbox_id: str, *, cause: cluster_pb2.DeathCause, detail: str) -> None:
        self._check(sandbox_id)
        del self.sandboxes[sandbox_id]
        self._did("kill", sandbox_id, f"{cluster_pb2.DeathCause.Name(cause)}: {detail}")

    async def pause(self, sandbox_id: str, *, detail: str) -> None:
        self._check(sandbox_id).state = PAUSED
        self._did("pause", sandbox_id, detail)

    async def detach(self, sandbox_id: str, lease_id: str) -> None:
        record = self._check(sandbox_id)
        assert record.lease_id == lease_id
        record.lease_id = ""
        self._did("detach", sandbox_id, lease_id)
