"""Listing sandboxes (`GET /v2/sandboxes`, legacy `GET /sandboxes`): the states clients see,
the query, and the filter and order its pages are cut from."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from aenv.cluster.v1 import cluster_pb2

RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
# States a client may see; the others are transitional or terminal and stay internal.
VISIBLE_STATES = frozenset({RUNNING, PAUSED})


@dataclass(frozen=True)
class ListQuery:
    states: frozenset[int] = VISIBLE_STATES
    metadata: dict[str, str] = field(default_factory=dict)
    template: str | None = None
    # Only the sandboxes under this experiment lease (docs/leases.md).
    lease_id: str | None = None
    started_after: datetime | None = None
    newest_first: bool = True
    limit: int | None = None
    cursor: str | None = None


@dataclass(frozen=True)
class Page:
    items: list[cluster_pb2.SandboxRecord]
    next_cursor: str | None


def matches(record: cluster_pb2.SandboxRecord, query: ListQuery) -> bool:
    if record.state not in query.states:
        return False
    if any(record.metadata.get(k) != v for k, v in query.metadata.items()):
        return False
    names = {record.template_id, record.alias, record.catalog_template_id} - {""}
    if query.template is not None and query.template not in names:
        return False
    if query.lease_id is not None and record.lease_id != query.lease_id:
        return False
    if query.started_after is not None:
        started_s: float = record.started_at.ToNanoseconds() / 1e9
        return started_s > query.started_after.timestamp()
    return True


def order_key(record: cluster_pb2.SandboxRecord) -> tuple[int, str]:
    return (record.started_at.ToNanoseconds(), record.sandbox_id)
