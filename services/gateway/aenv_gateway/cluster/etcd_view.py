"""The production ClusterView: watched etcd mirrors of the sandbox and node records."""

from __future__ import annotations

import time
from collections.abc import Iterable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import NODES, SANDBOXES, SNAPSHOTS, ClusterStore, RecordCache, Versioned
from aenv_common.config import CommonSettings

# How long a deletion is remembered: longer than the directory keeps an RPC's answer.
DELETIONS_KEPT_S = 120.0


class EtcdClusterView:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store
        self._sandboxes = RecordCache(store, SANDBOXES, cluster_pb2.SandboxRecord)
        self._nodes = RecordCache(store, NODES, cluster_pb2.NodeRecord)
        self._snapshots = RecordCache(store, SNAPSHOTS, cluster_pb2.SnapshotRecord)
        # sandbox id -> (the mirror's revision, time.monotonic()) when it saw the record deleted
        self._deleted: dict[str, tuple[int, float]] = {}
        self._sandboxes.add_listener(self._on_sandbox)

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

    def revision(self) -> int:
        return self._sandboxes.revision

    def sandbox_deleted(self, sandbox_id: str) -> int | None:
        deleted = self._deleted.get(sandbox_id)
        return None if deleted is None else deleted[0]

    def _on_sandbox(self, sandbox_id: str, entry: Versioned[cluster_pb2.SandboxRecord] | None
                    ) -> None:
        if entry is not None:
            self._deleted.pop(sandbox_id, None)
            return
        now = time.monotonic()
        for stale in [k for k, (_, at) in self._deleted.items() if now - at > DELETIONS_KEPT_S]:
            del self._deleted[stale]
        self._deleted[sandbox_id] = (self._sandboxes.revision, now)

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return self._nodes.get(node_id)

    def nodes(self) -> Iterable[cluster_pb2.NodeRecord]:
        return self._nodes.values()

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
        return self._snapshots.get(snapshot_id)

    def snapshots(self) -> Iterable[cluster_pb2.SnapshotRecord]:
        return self._snapshots.values()
