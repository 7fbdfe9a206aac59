"""The production ClusterView: watched etcd mirrors of the sandbox and node records."""

from __future__ import annotations

from collections.abc import Iterable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import NODES, SANDBOXES, SNAPSHOTS, ClusterStore, RecordCache
from aenv_common.config import CommonSettings


class EtcdClusterView:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store
        self._sandboxes = RecordCache(store, SANDBOXES, cluster_pb2.SandboxRecord)
        self._nodes = RecordCache(store, NODES, cluster_pb2.NodeRecord)
        self._snapshots = RecordCache(store, SNAPSHOTS, cluster_pb2.SnapshotRecord)

    @classmethod
    async def open(cls, settings: CommonSettings) -> EtcdClusterView:
        view = cls(await ClusterStore.connect(settings))
        try:
            await view._sandboxes.start()
            await view._nodes.start()
            await view._snapshots.start()
        except BaseException:
            await view.close()
            raise
        return view

    @property
    def store(self) -> ClusterStore:
        """For what the gateway writes (the template catalog)."""
        return self._store

    async def close(self) -> None:
        await self._sandboxes.stop()
        await self._nodes.stop()
        await self._snapshots.stop()
        await self._store.close()

    def sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        return self._sandboxes.get(sandbox_id)

    def sandboxes(self) -> Iterable[cluster_pb2.SandboxRecord]:
        return self._sandboxes.values()

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return self._nodes.get(node_id)

    def nodes(self) -> Iterable[cluster_pb2.NodeRecord]:
        return self._nodes.values()

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
        return self._snapshots.get(snapshot_id)

    def snapshots(self) -> Iterable[cluster_pb2.SnapshotRecord]:
        return self._snapshots.values()
