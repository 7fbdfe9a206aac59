"""Cluster records held in memory: for tests and benchmarks of one node without etcd. Records
are copied in and out, as etcd's encoding would."""

from __future__ import annotations

from collections.abc import Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound


def _copy(rec: cluster_pb2.SandboxRecord) -> cluster_pb2.SandboxRecord:
    copied = cluster_pb2.SandboxRecord()
    copied.CopyFrom(rec)
    return copied


class MemoryRecords:
    """Sandbox records, and the nodes registered (by id), of one in-memory cluster."""

    def __init__(self) -> None:
        self.records: dict[str, cluster_pb2.SandboxRecord] = {}
        self.nodes: dict[str, cluster_pb2.NodeRecord] = {}

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord) -> int:
        self.records[rec.sandbox_id] = _copy(rec)
        return len(self.records)

    async def delete_sandbox(self, sandbox_id: str) -> None:
        self.records.pop(sandbox_id, None)

    async def get_sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        rec = self.records.get(sandbox_id)
        return _copy(rec) if rec is not None else None

    async def update_sandbox(
        self, sandbox_id: str, mutate: Callable[[cluster_pb2.SandboxRecord], None]
    ) -> cluster_pb2.SandboxRecord:
        rec = await self.get_sandbox(sandbox_id)
        if rec is None:
            raise NotFound(f"sandboxes '{sandbox_id}' not found")
        mutate(rec)  # no await in between: nothing else writes meanwhile
        self.records[sandbox_id] = _copy(rec)
        return rec

    async def get_node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return self.nodes.get(node_id)
