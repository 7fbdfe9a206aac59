"""Fakes shared by the node agent's tests."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2


class MemoryRecords:
    """Where sandbox records go in tests that do not need etcd (SandboxRecords protocol)."""

    def __init__(self) -> None:
        self.records: dict[str, cluster_pb2.SandboxRecord] = {}

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord) -> int:
        self.records[rec.sandbox_id] = cluster_pb2.SandboxRecord.FromString(rec.SerializeToString())
        return len(self.records)

    async def delete_sandbox(self, sandbox_id: str) -> None:
        self.records.pop(sandbox_id, None)
