"""E2B's `GET /templates/{id}/builds/{buildID}/logs` over a build's log (its record): from a
`cursor` (a time in Unix milliseconds) forward or backward, at least a `level`, at most `limit`
(100) entries. Pure.

Both `source`s read the same log: the build's record in etcd is what E2B keeps "persistent", and
a running build's lines reach it within a second (what E2B serves "temporary").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_gateway.rest.query import optional_int
from aenv_gateway.rest.templates.wire import present_entry

MAX_ENTRIES = 100
LEVELS = ("debug", "info", "warn", "error")
SOURCES = ("persistent", "temporary")
DIRECTIONS = ("forward", "backward")


def build_logs(
    entries: Sequence[cluster_pb2.BuildLogEntry], query: Mapping[str, str]
) -> dict[str, Any]:
    """TemplateBuildLogsResponse."""
    direction = _choice(query, "direction", DIRECTIONS) or "forward"
    level = _choice(query, "level", LEVELS)
    _choice(query, "source", SOURCES)
    limit = min(optional_int(query, "limit") or MAX_ENTRIES, MAX_ENTRIES)
    cursor = optional_int(query, "cursor")
    least = LEVELS.index(level) if level else 0
    picked = [e for e in entries if _rank(e.level) >= least]
    if direction == "backward":
        picked.reverse()
    if cursor is not None:
        forward = direction == "forward"
        picked = [e for e in picked
                  if (e.time.ToMilliseconds() >= cursor if forward
                      else e.time.ToMilliseconds() <= cursor)]
    return {"logs": [present_entry(e) for e in picked[:max(limit, 0)]]}


def _rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else LEVELS.index("info")


def _choice(query: Mapping[str, str], name: str, allowed: Sequence[str]) -> str | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    if value not in allowed:
        raise InvalidArgument(f"{name} must be one of {', '.join(allowed)}")
    return value


