"""Sandbox logs (`GET /sandboxes/{id}/logs`, `GET /v2/sandboxes/{id}/logs`): the queries, cut
into the windows E2B's API cuts, the call to the sandbox's node agent (which keeps the lines its
guest writes to the console, stamped when read: the node agent's sandbox/logs.py) and the bodies.

As E2B's API: v1 takes `start` (unix ms; default a week ago) and `limit` (default 1000) and
answers oldest first, both as `logs` (timestamp, line) and `logEntries` (timestamp, level,
message, fields). v2 takes `cursor` (unix ms), `limit` (0 to 1000, default 1000), `direction`
(default backward: newest first), `level` (the least one wanted) and `search` (a case-sensitive
substring of the message, up to 256 characters); forward reads the week from the cursor on,
backward the week up to the cursor, which it excludes. A paused sandbox answers what it logged
before its pause (nothing once its node is gone); a killed one is not found.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.rest.schemas import MAX_INT64, rfc3339

WEEK_MS = 7 * 24 * 3600 * 1000
DEFAULT_LIMIT = 1000
MAX_LIMIT_V2 = 1000
MAX_SEARCH = 256
_MAX_UINT32 = 2**32 - 1
LEVELS = {
    "debug": nodeagent_pb2.LOG_LEVEL_DEBUG,
    "info": nodeagent_pb2.LOG_LEVEL_INFO,
    "warn": nodeagent_pb2.LOG_LEVEL_WARN,
    "error": nodeagent_pb2.LOG_LEVEL_ERROR,
}
_LEVEL_NAMES = {value: name for name, value in LEVELS.items()}


def _int_param(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer") from None
    if not 0 <= number <= MAX_INT64:
        raise InvalidArgument(f"{name} must be between 0 and {MAX_INT64}")
    return number


def _limit(params: Mapping[str, str], most: int | None) -> int:
    limit = _int_param(params, "limit")
    if limit is None:
        return DEFAULT_LIMIT
    if most is not None and limit > most:
        raise InvalidArgument(f"limit must be between 0 and {most}")
    return min(limit, _MAX_UINT32)  # v1 sets no bound: more than a node keeps is everything


def parse_logs_v1(
    params: Mapping[str, str], now_ms: int
) -> nodeagent_pb2.GetSandboxLogsRequest:
    """`?start=&limit=`: the oldest `limit` entries from `start` on."""
    start = _int_param(params, "start")
    return nodeagent_pb2.GetSandboxLogsRequest(
        start_ms=now_ms - WEEK_MS if start is None else start, limit=_limit(params, None))


def parse_logs_v2(
    params: Mapping[str, str], now_ms: int
) -> nodeagent_pb2.GetSandboxLogsRequest:
    """`?cursor=&limit=&direction=&level=&search=`."""
    direction = params.get("direction") or "backward"
    if direction not in ("forward", "backward"):
        raise InvalidArgument("direction must be forward or backward")
    level = params.get("level") or None
    if level is not None and level not in LEVELS:
        raise InvalidArgument(f"level must be one of {', '.join(LEVELS)}")
    search = params.get("search") or ""
    if len(search) > MAX_SEARCH:
        raise InvalidArgument(f"search must be at most {MAX_SEARCH} characters")
    request = nodeagent_pb2.GetSandboxLogsRequest(
        limit=_limit(params, MAX_LIMIT_V2), backward=direction == "backward",
        min_level=LEVELS[level] if level else nodeagent_pb2.LOG_LEVEL_UNSPECIFIED,
        search=search,
    )
    cursor = _int_param(params, "cursor")
    if cursor is None:
        request.start_ms = now_ms - WEEK_MS
    elif request.backward:
        request.start_ms, request.end_ms = cursor - WEEK_MS, cursor
    else:
        request.start_ms, request.end_ms = cursor, min(cursor + WEEK_MS, MAX_INT64)
    return request


def present_entry(entry: nodeagent_pb2.SandboxLogEntry) -> dict[str, Any]:
    """SandboxLogEntry."""
    return {
        "timestamp": rfc3339(entry.timestamp),
        "level": _LEVEL_NAMES.get(entry.level, "info"),
        "message": entry.message,
        "fields": dict(entry.fields),
    }


def present_line(entry: nodeagent_pb2.SandboxLogEntry) -> dict[str, Any]:
    """SandboxLog (v1's raw lines)."""
    return {"timestamp": rfc3339(entry.timestamp), "line": entry.line}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class SandboxLogs:
    """Reads a sandbox's logs from the node agent that keeps them."""

    def __init__(
        self, sandboxes: SandboxService, nodeagents: NodeAgentClients,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self._sandboxes = sandboxes
        self._nodeagents = nodeagents
        self.clock_ms = clock_ms

    async def read(
        self, sandbox_id: str, query: nodeagent_pb2.GetSandboxLogsRequest
    ) -> list[nodeagent_pb2.SandboxLogEntry]:
        """:raise NotFound: no such sandbox (or killed)."""
        located = self._sandboxes.observed(sandbox_id)
        if located is None or query.limit == 0:
            return []
        request = nodeagent_pb2.GetSandboxLogsRequest()
        request.CopyFrom(query)
        request.sandbox_id = sandbox_id
        return await self._nodeagents.logs(located.owner.nodeagent_address, request)
