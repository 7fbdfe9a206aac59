"""E2B JSON <-> service types: request validation and response shapes (spec e2b-compat §2.2).

Property names are the wire's (camelCase, plus `templateID`-style and snake_case
`allow_internet_access`). Every validation failure is an InvalidArgument (HTTP 400).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument
from aenv_gateway.core.batch import batch_size
from aenv_gateway.core.idempotency import checked_key
from aenv_gateway.core.listing import PAUSED, RUNNING, VISIBLE_STATES, ListQuery
from aenv_gateway.core.policy import MAX_PAGE, item_over_shared
from aenv_gateway.core.sandboxes import REFRESH_MAX_S, CreateRequest
from aenv_gateway.core.snapshots import SnapshotQuery
from aenv_gateway.core.volumes.mounts import MountRequest
from aenv_gateway.rest.json_fields import json_field as json_field
from aenv_gateway.rest.json_fields import json_strings as json_strings
from aenv_gateway.rest.network_schema import (
    PasswordSealer,
    parse_network,
    present_internet_access,
    present_network,
)

# Times the node agent takes (unix seconds or ms) are int64.
MAX_INT64 = 2**63 - 1
_STATE_NAMES = {RUNNING: "running", PAUSED: "paused"}
_STATES_BY_NAME = {v: k for k, v in _STATE_NAMES.items()}


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """An empty body counts as `{}` (the SDK sends `{}` but older clients send nothing)."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidArgument(f"malformed JSON body: {err}") from err
    if not isinstance(body, dict):
        raise InvalidArgument("request body must be a JSON object")
    return body


def _string_map(body: Mapping[str, Any], name: str) -> dict[str, str]:
    value = json_field(body, name, dict) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidArgument(f"{name} must map strings to strings")
    return dict(value)


def parse_new_sandbox(
    body: Mapping[str, Any], default_timeout_s: int, idempotency_key: str | None,
    seal: PasswordSealer,
) -> CreateRequest:
    """NewSandboxV2, and v1 NewSandbox (whose `secure` is accepted: we always secure envd). An
    absent timeout is the route's default; a given one is checked (0 is refused, as E2B's)."""
    json_field(body, "secure", bool)
    _refuse_unserved(body)
    timeout = json_field(body, "timeout", int)
    return CreateRequest(
        template_id=json_field(body, "templateID", str, required=True) or "",
        timeout_s=default_timeout_s if timeout is None else timeout,
        env_vars=_string_map(body, "envVars"),
        metadata=_string_map(body, "metadata"),
        network=parse_network(body, seal),
        lifecycle=_lifecycle(body),
        idempotency_key=checked_key(idempotency_key),
        volume_mounts=parse_volume_mounts(body),
    )


def parse_volume_mounts(body: Mapping[str, Any]) -> tuple[MountRequest, ...]:
    """E2B's `volumeMounts: [{name, path}]` (the name may also be a volume id), and the
    extension `readOnly` on a mount (E2B's mounts are read-write)."""
    mounts = json_field(body, "volumeMounts", list) or []
    parsed: list[MountRequest] = []
    for mount in mounts:
        if not isinstance(mount, dict):
            raise InvalidArgument("volumeMounts must be an array of {name, path} objects")
        parsed.append(MountRequest(
            path=json_field(mount, "path", str, required=True) or "",
            volume=json_field(mount, "name", str, required=True) or "",
            read_only=json_field(mount, "readOnly", bool) is True))
    return tuple(parsed)


def present_volume_mounts(record: cluster_pb2.SandboxRecord) -> list[dict[str, Any]]:
    """SandboxVolumeMount: E2B's `{name, path}`, plus the extension `readOnly: true` for a
    read-only mount only (so a read-write one is E2B's shape exactly); never the ticket."""
    return [{"name": m.name, "path": m.path} | ({"readOnly": True} if m.read_only else {})
            for m in record.volume_mounts]


def _refuse_unserved(body: Mapping[str, Any]) -> None:
    """Services this platform does not run: a sandbox asking for them is refused, never made
    without them (the SDKs send none of these keys unless asked)."""
    if body.get("mcp"):
        raise InvalidArgument("mcp: this platform runs no MCP gateway in sandboxes")
    iam = json_field(body, "iam", dict) or {}
    if json_field(iam, "tokens", dict):
        raise InvalidArgument("iam.tokens: this platform issues no workload identity tokens")


def parse_batch(
    body: Mapping[str, Any], default_timeout_s: int, seal: PasswordSealer
) -> list[CreateRequest]:
    """`POST /sandboxes/batch`: the NewSandbox fields every sandbox shares, and `count` alike
    sandboxes or `items` (one per sandbox, each a NewSandbox whose fields override the shared
    ones, `metadata` and `envVars` key by key). Malformed input refuses the whole batch; what
    fails creating one sandbox is that item's result."""
    items = json_field(body, "items", list) or []
    count = json_field(body, "count", int)
    if count is not None and count < 1:
        raise InvalidArgument("count must be at least 1")
    size = batch_size(count or 0, len(items))
    shared = {k: v for k, v in body.items() if k not in ("count", "items")}
    if not all(isinstance(item, dict) for item in items):
        raise InvalidArgument("items must be an array of objects")
    merged = [_over(shared, item) for item in items] or [shared] * size
    return [parse_new_sandbox(spec, default_timeout_s, None, seal) for spec in merged]


def _over(shared: Mapping[str, Any], item: Mapping[str, Any]) -> dict[str, Any]:
    spec = {**shared, **{k: v for k, v in item.items() if v is not None}}
    for name in ("metadata", "envVars"):
        below, above = shared.get(name), item.get(name)
        if isinstance(below, dict) and isinstance(above, dict):
            spec[name] = item_over_shared(below, above)
    return spec


def _lifecycle(body: Mapping[str, Any]) -> cluster_pb2.Lifecycle:
    auto_resume = json_field(body, "autoResume", dict) or {}
    resumes = bool(json_field(auto_resume, "enabled", bool))
    keep_memory = json_field(body, "autoPauseMemory", bool) is not False
    if resumes and not keep_memory:
        # Traffic would have to cold-boot it, which E2B never does on its own either.
        raise InvalidArgument("autoPauseMemory: false cannot be combined with autoResume")
    return cluster_pb2.Lifecycle(
        auto_pause=bool(json_field(body, "autoPause", bool)),
        auto_resume=resumes,
        auto_pause_mode=(cluster_pb2.PAUSE_MODE_UNSPECIFIED if keep_memory
                         else cluster_pb2.PAUSE_MODE_FILESYSTEM),
    )


def parse_memory(body: Mapping[str, Any]) -> bool:
    """`memory` of pause, snapshot and connect bodies: false = the filesystem only."""
    return json_field(body, "memory", bool) is not False


def parse_timeout(body: Mapping[str, Any], required: bool) -> int | None:
    return json_field(body, "timeout", int, required=required)


def parse_refresh(body: Mapping[str, Any]) -> int | None:
    """SandboxRefreshRequest: an optional `duration` in seconds, within E2B's OpenAPI bounds."""
    duration = json_field(body, "duration", int)
    if duration is not None and not 0 <= duration <= REFRESH_MAX_S:
        raise InvalidArgument(f"duration must be between 0 and {REFRESH_MAX_S} seconds")
    return duration


def parse_limit(params: Mapping[str, str]) -> int:
    limit = _int_param(params, "limit")
    if limit is None:
        return MAX_PAGE
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be between 1 and {MAX_PAGE}")
    return limit


def parse_snapshot_query(params: Mapping[str, str]) -> SnapshotQuery:
    """`GET /snapshots?sandboxID=&name=&limit=&nextToken=`."""
    return SnapshotQuery(
        sandbox_id=params.get("sandboxID") or None,
        name=params.get("name") or None,
        limit=parse_limit(params),
        cursor=params.get("nextToken") or None,
    )


def parse_list_query(params: Mapping[str, str], paginated: bool) -> ListQuery:
    limit = parse_limit(params) if paginated else None
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidArgument("order must be asc or desc")
    return ListQuery(
        states=_states(params.get("state")) if paginated else frozenset({RUNNING}),
        metadata=parse_metadata_filter(params.get("metadata")),
        template=params.get("template") or None,
        lease_id=params.get("leaseID") or None,
        started_after=_datetime_param(params, "startedAfter"),
        newest_first=order == "desc",
        limit=limit,
        cursor=params.get("nextToken") or None,
    )


def parse_metadata_filter(value: str | None) -> dict[str, str]:
    """The filter is encoded in layers: the SDK percent-encodes each key and value, urlencodes
    the pairs into one string, and that string is the query value. After the framework's own
    decoding, parse the pairs and percent-decode each key and value once more."""
    if not value:
        return {}
    pairs = parse_qsl(value, keep_blank_values=True, strict_parsing=False)
    return {unquote(k): unquote(v) for k, v in pairs}


def _states(value: str | None) -> frozenset[int]:
    if not value:
        return VISIBLE_STATES
    try:
        return frozenset(_STATES_BY_NAME[s.strip()] for s in value.split(",") if s.strip())
    except KeyError as err:
        raise InvalidArgument(f"unknown state {err.args[0]!r} (running, paused)") from err


def _int_param(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as err:  # also "": present but no integer
        raise InvalidArgument(f"{name} must be an integer") from err


def _datetime_param(params: Mapping[str, str], name: str) -> datetime | None:
    value = params.get(name)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as err:
        raise InvalidArgument(f"{name} must be an ISO 8601 date-time") from err
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def rfc3339(ts: Timestamp) -> str:
    moment: datetime = ts.ToDatetime(tzinfo=UTC)
    return moment.isoformat().replace("+00:00", "Z")


def present_metric(metric: nodeagent_pb2.SandboxMetric) -> dict[str, Any]:
    """SandboxMetric (every field required by the SDKs)."""
    return {
        "timestamp": rfc3339(metric.timestamp),
        "timestampUnix": metric.timestamp.seconds,
        "cpuCount": metric.cpu_count,
        "cpuUsedPct": metric.cpu_used_pct,
        "memUsed": metric.mem_used,
        "memTotal": metric.mem_total,
        "memCache": metric.mem_cache,
        "diskUsed": metric.disk_used,
        "diskTotal": metric.disk_total,
    }


class Presenter:
    """Builds response bodies from records."""

    def __init__(self, domain: str | None, fallback_envd_version: str) -> None:
        self._domain = domain
        self._fallback_envd = fallback_envd_version

    def sandbox(self, record: cluster_pb2.SandboxRecord) -> dict[str, Any]:
        body = self._identity(record)
        body.update(
            envdAccessToken=record.envd_access_token or None,
            trafficAccessToken=record.traffic_access_token or None,
            domain=self._domain,
        )
        if not record.envd_access_token:
            del body["envdAccessToken"]
        return body

    def detail(self, record: cluster_pb2.SandboxRecord) -> dict[str, Any]:
        body = self.listed(record)
        body.update(
            allowInternetAccess=present_internet_access(record.network),
            domain=self._domain,
            network=present_network(record.network),
            lifecycle={
                "autoResume": record.lifecycle.auto_resume,
                "onTimeout": "pause" if record.lifecycle.auto_pause else "kill",
            },
        )
        if record.envd_access_token:
            body["envdAccessToken"] = record.envd_access_token
        if record.state == PAUSED:
            body["pauseMode"] = (
                "filesystem" if record.pause_mode == cluster_pb2.PAUSE_MODE_FILESYSTEM else "full")
        return body

    def listed(self, record: cluster_pb2.SandboxRecord) -> dict[str, Any]:
        body = self._identity(record)
        body.update(
            startedAt=rfc3339(record.started_at),
            endAt=rfc3339(record.end_at),
            cpuCount=record.resources.vcpus,
            memoryMB=record.resources.memory_mib,
            diskSizeMB=record.resources.disk_mib,
            state=_STATE_NAMES.get(record.state, "running"),
            metadata=dict(record.metadata),
            volumeMounts=present_volume_mounts(record),
        )
        if record.state == PAUSED and record.envd_unresponsive_at_pause:
            # Omitted otherwise, as E2B's: only a paused sandbox's snapshot can carry it.
            body["envdUnresponsiveAtPause"] = True
        return body

    def _identity(self, record: cluster_pb2.SandboxRecord) -> dict[str, Any]:
        body: dict[str, Any] = {
            # E2B's template id: the catalog's for a built template, not the build the node
            # restores.
            "templateID": record.catalog_template_id or record.template_id,
            "sandboxID": record.sandbox_id,
            "clientID": record.node_id or "aenv",
            "envdVersion": record.envd_version or self._fallback_envd,
        }
        if record.alias:
            body["alias"] = record.alias
        return body

