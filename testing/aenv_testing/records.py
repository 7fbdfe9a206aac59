"""Cluster records held in memory: for tests and benchmarks of one node without etcd. Records
are copied in and out, as etcd's encoding would."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.protobuf.message import Message

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound

M = TypeVar("M", bound=Message)


def _copy(rec: cluster_pb2.SandboxRecord) -> cluster_pb2.SandboxRecord:
    copied = cluster_pb2.SandboxRecord()
    copied.CopyFrom(rec)
    return copied


class MemoryRecords:
    """Sandbox records, the nodes registered (by id), and records of other kinds (snapshots),
    of one in-memory cluster."""

    def __init__(self) -> None:
        self.records: dict[str, cluster_pb2.SandboxRecord] = {}
        self.nodes: dict[str, cluster_pb2.NodeRecord] = {}
        self.by_kind: dict[str, dict[str, bytes]] = {}

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

    async def put_record(self, kind: str, record_id: str, record: Message) -> int:
        self.by_kind.setdefault(kind, {})[record_id] = record.SerializeToString()
        return len(self.by_kind[kind])

    async def delete_record(self, kind: str, record_id: str) -> None:
        self.by_kind.get(kind, {}).pop(record_id, None)

    async def get_record(self, kind: str, record_id: str, record_type: type[M]) -> M | None:
        data = self.by_kind.get(kind, {}).get(record_id)
        return None if data is None else record_type.FromString(data)

    async def list_records(self, kind: str, record_type: type[M]) -> list[M]:
        return [record_type.FromString(data) for data in self.by_kind.get(kind, {}).values()]
