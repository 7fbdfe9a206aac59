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
from typing import Any, Generic, Protocol, TypeVar

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound
from aenv_common.rollout import tag_current_span


class ClusterView(Protocol):
    """Read access to the watched sandbox and node records (etcd-backed in production)."""

    def sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None: ...

    def sandboxes(self) -> Iterable[cluster_pb2.SandboxRecord]: ...

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None: ...

    def nodes(self) -> Iterable[cluster_pb2.NodeRecord]: ...

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None: ...

    def snapshots(self) -> Iterable[cluster_pb2.SnapshotRecord]: ...

    def revision(self) -> int:
        """The revision the sandbox mirror has caught up to."""
        ...

    def sandbox_deleted(self, sandbox_id: str) -> int | None:
        """The revision at which the mirror saw the sandbox's record deleted, lately (and not
        written again since); None if it did not."""
        ...


@dataclass(frozen=True)
class Owner:
    node_id: str
    nodeagent_address: str
    proxy_address: str


@dataclass(frozen=True)
class Located:
    record: cluster_pb2.SandboxRecord
    owner: Owner


T = TypeVar("T")


@dataclass
class _Fresh(Generic[T]):
    value: T | None  # None = gone
    written: float
    expires: float
    revision: int  # the mirror's when it was written


class RecentWrites(Generic[T]):
    """What the gateway itself just learned from RPC answers, kept for `ttl_s` seconds: long
    enough for the etcd watch to catch up. `None` marks a record as gone."""

    def __init__(self, ttl_s: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._entries: dict[str, _Fresh[T]] = {}

    def put(self, key: str, value: T | None, revision: int = 0) -> None:
        now = self._clock()
        self._entries[key] = _Fresh(value, now, now + self._ttl, revision)

    def get(self, key: str) -> _Fresh[T] | None:
        self.expire()
        return self._entries.get(key)

    def items(self) -> list[tuple[str, T | None]]:
        return [(key, entry.value) for key, entry in self.entries()]

    def entries(self) -> list[tuple[str, _Fresh[T]]]:
        self.expire()
        return list(self._entries.items())

    def age(self, entry: _Fresh[T]) -> float:
        return self._clock() - entry.written

    def expire(self) -> None:
        now = self._clock()
        for key in [k for k, v in self._entries.items() if v.expires <= now]:
            del self._entries[key]


R = TypeVar("R")


def merged(
    mirrored: Iterable[R], recent: Iterable[tuple[str, R | None]], key: Callable[[R], str]
) -> list[R]:
    """The mirror, plus just-written records it lacks, minus just-deleted ones."""
    by_id = {key(r): r for r in mirrored}
    for record_id, record in recent:
        if record is None:
            by_id.pop(record_id, None)
        else:
            by_id.setdefault(record_id, record)
    return list(by_id.values())


class SandboxDirectory:
    def __init__(
        self,
        view: ClusterView,
        overlay_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        settle_s: float = 2.0,
    ) -> None:
        self._view = view
        # For this long an RPC answer beats the mirror, which may still show the state before
        # (e.g. "paused" right after a resume).
        self._settle_s = settle_s
        self._fresh: RecentWrites[Located | cluster_pb2.SandboxRecord] = RecentWrites(
            overlay_ttl_s, clock
        )
        self._fresh_snapshots: RecentWrites[cluster_pb2.SnapshotRecord] = RecentWrites(
            overlay_ttl_s, clock
        )

    def remember(self, record: cluster_pb2.SandboxRecord, owner: Owner | None = None) -> None:
        """Records what an RPC just returned, so it is visible before the watch delivers it."""
        self._fresh.put(record.sandbox_id, Located(record, owner) if owner else record,
                        self._view.revision())

    def forget(self, sandbox_id: str) -> None:
        """Marks a sandbox as killed, even if the mirror still shows it for a moment."""
        self._fresh.put(sandbox_id, None)

    def find(self, sandbox_id: str) -> Located | None:
        located = self._find(sandbox_id)
        if located is not None:
            # The request naming it is one of its spans: its rollout attributes, a link to its
            # creator's trace (aenv_common/rollout.py).
            tag_current_span(located.record)
        return located

    def _deleted_since(self, sandbox_id: str, fresh: _Fresh[Any]) -> bool:
        """The mirror saw the record deleted after the gateway learned of it (e.g. its VM
        crashed a moment after its create): the answer remembered is out of date."""
        deleted = self._view.sandbox_deleted(sandbox_id)
        return deleted is not None and deleted > fresh.revision

    def _find(self, sandbox_id: str) -> Located | None:
        fresh = self._fresh.get(sandbox_id)
        known = fresh.value if fresh is not None else None
        if fresh is not None and (known is None or self._deleted_since(sandbox_id, fresh)):
            return None
        if isinstance(known, Located) and fresh and self._fresh.age(fresh) < self._settle_s:
            return known
        # Else the mirror wins when it has the record: it carries the node agent's latest write.
        mirrored = self._view.sandbox(sandbox_id)
        if mirrored is None and isinstance(known, Located):
            return known
        record = mirrored if mirrored is not None else known
        if not isinstance(record, cluster_pb2.SandboxRecord):
            return None
        owner = self.owner_of(record.node_id)
        return Located(record, owner) if owner else None

    def orphan(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        """The record of a sandbox whose node is gone (which `find` does not locate)."""
        fresh = self._fresh.get(sandbox_id)
        if fresh is not None and fresh.value is None:
            return None  # just killed
        record = self._view.sandbox(sandbox_id)
        if record is None or self.owner_of(record.node_id) is not None:
            return None
        return record

    def locate(self, sandbox_id: str) -> Located:
        located = self.find(sandbox_id)
        if located is None:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        return located

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        """Every known record: the mirror, plus just-created ones, minus just-killed ones."""
        recent = [
            (sandbox_id, None if self._deleted_since(sandbox_id, fresh)
             else fresh.value.record if isinstance(fresh.value, Located) else fresh.value)
            for sandbox_id, fresh in self._fresh.entries()
        ]
        return merged(self._view.sandboxes(), recent, lambda r: r.sandbox_id)

    def owner_of(self, node_id: str) -> Owner | None:
        node = self._view.node(node_id)
        if node is None:
            return None
        return _owner(node)

    def live_owners(self) -> list[Owner]:
        return [_owner(node) for node in self._view.nodes()]

    # Snapshots (records written by the node agent that holds the snapshot's files) ----------

    def remember_snapshot(self, record: cluster_pb2.SnapshotRecord) -> None:
        self._fresh_snapshots.put(record.snapshot_id, record)

    def forget_snapshot(self, snapshot_id: str) -> None:
        self._fresh_snapshots.put(snapshot_id, None)

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
        fresh = self._fresh_snapshots.get(snapshot_id)
        if fresh is not None:
            return fresh.value
        return self._view.snapshot(snapshot_id)

    def snapshots(self) -> list[cluster_pb2.SnapshotRecord]:
        return merged(
            self._view.snapshots(), self._fresh_snapshots.items(), lambda r: r.snapshot_id
        )


def _owner(node: cluster_pb2.NodeRecord) -> Owner:
    return Owner(node.node_id, node.nodeagent_address, node.proxy_address)


class InMemoryClusterView:
    """A ClusterView over plain dicts: for tests and for single-process setups."""

    def __init__(self) -> None:
        self.sandbox_records: dict[str, cluster_pb2.SandboxRecord] = {}
        # What `delete_sandbox` removed, at which of `revision`'s counts.
        self.deleted_sandboxes: dict[str, int] = {}
        self.revisions = 0
        self.node_records: dict[str, cluster_pb2.NodeRecord] = {}
        self.snapshot_records: dict[str, cluster_pb2.SnapshotRecord] = {}

    def sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        return self.sandbox_records.get(sandbox_id)

    def sandboxes(self) -> Iterable[cluster_pb2.SandboxRecord]:
        return list(self.sandbox_records.values())

    def node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return self.node_records.get(node_id)

    def nodes(self) -> Iterable[cluster_pb2.NodeRecord]:
        return list(self.node_records.values())

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
        return self.snapshot_records.get(snapshot_id)

    def snapshots(self) -> Iterable[cluster_pb2.SnapshotRecord]:
        return list(self.snapshot_records.values())

    def revision(self) -> int:
        return self.revisions

    def sandbox_deleted(self, sandbox_id: str) -> int | None:
        return self.deleted_sandboxes.get(sandbox_id)

    def delete_sandbox(self, sandbox_id: str) -> None:
        """Removes the record as etcd's delete would, seen by the mirror."""
        self.revisions += 1
        self.sandbox_records.pop(sandbox_id, None)
        self.deleted_sandboxes[sandbox_id] = self.revisions
