"""Where sandboxes live: the gateway's read-only view of cluster state.

The view is a watched mirror of etcd (`ClusterView`), so the data plane resolves owners without a
round trip. The node agent writes sandbox records; the gateway never does. Because the watch lags
the node agent's write by a few milliseconds, and the SDK talks to envd right after the 201, the
directory also keeps a short-lived overlay of what the gateway itself just learned from RPC
answers: records it created (used until the mirror has them) and kills (hidden at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound


class ClusterView(Protocol):
    """Read access to the watched sandbox and node records (etcd-backed in production)."""

    def sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None: ...

    def sandboxes(self) -> Iterable[cluster_pb2.SandboxRecord]: ...

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None: ...


@dataclass(frozen=True)
class Owner:
    node_id: str
    nodeagent_address: str
    proxy_address: str


@dataclass(frozen=True)
class Located:
    record: cluster_pb2.SandboxRecord
    owner: Owner


@dataclass
class _Fresh:
    record: cluster_pb2.SandboxRecord | None  # None = killed
    owner: Owner | None
    expires: float


class SandboxDirectory:
    def __init__(
        self,
        view: ClusterView,
        overlay_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._view = view
        self._ttl = overlay_ttl_s
        self._clock = clock
        self._fresh: dict[str, _Fresh] = {}

    def remember(self, record: cluster_pb2.SandboxRecord, owner: Owner | None = None) -> None:
        """Records what an RPC just returned, so it is visible before the watch delivers it."""
        self._fresh[record.sandbox_id] = _Fresh(record, owner, self._clock() + self._ttl)

    def forget(self, sandbox_id: str) -> None:
        """Marks a sandbox as killed, even if the mirror still shows it for a moment."""
        self._fresh[sandbox_id] = _Fresh(None, None, self._clock() + self._ttl)

    def find(self, sandbox_id: str) -> Located | None:
        fresh = self._fresh_entry(sandbox_id)
        if fresh is not None and fresh.record is None:
            return None
        # The mirror wins when it has the record: it carries the node agent's latest write.
        record = self._view.sandbox(sandbox_id)
        if record is not None:
            owner = self._owner_of(record.node_id)
        elif fresh is not None and fresh.record is not None:
            record = fresh.record
            owner = fresh.owner or self._owner_of(record.node_id)
        else:
            return None
        return Located(record, owner) if owner else None

    def locate(self, sandbox_id: str) -> Located:
        located = self.find(sandbox_id)
        if located is None:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        return located

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        """Every known record: the mirror, plus just-created ones, minus just-killed ones."""
        self._expire()
        merged = {r.sandbox_id: r for r in self._view.sandboxes()}
        for sandbox_id, fresh in self._fresh.items():
            if fresh.record is None:
                merged.pop(sandbox_id, None)
            else:
                merged.setdefault(sandbox_id, fresh.record)
        return list(merged.values())

    def _owner_of(self, node_id: str) -> Owner | None:
        node = self._view.node(node_id)
        if node is None:
            return None
        return Owner(node.node_id, node.nodeagent_address, node.proxy_address)

    def _fresh_entry(self, sandbox_id: str) -> _Fresh | None:
        fresh = self._fresh.get(sandbox_id)
        if fresh is None:
            return None
        if fresh.expires <= self._clock():
            del self._fresh[sandbox_id]
            return None
        return fresh

    def _expire(self) -> None:
        now = self._clock()
        for sandbox_id in [k for k, v in self._fresh.items() if v.expires <= now]:
            del self._fresh[sandbox_id]


class InMemoryClusterView:
    """A ClusterView over plain dicts: for tests and for single-process setups."""

    def __init__(self) -> None:
        self.sandbox_records: dict[str, cluster_pb2.SandboxRecord] = {}
        self.node_records: dict[str, cluster_pb2.NodeRecord] = {}

    def sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        return self.sandbox_records.get(sandbox_id)

    def sandboxes(self) -> Iterable[cluster_pb2.SandboxRecord]:
        return list(self.sandbox_records.values())

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return self.node_records.get(node_id)
