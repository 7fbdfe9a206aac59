"""Leases and bulk operations in the REST JSON (camelCase, as the rest of the REST API)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_common.status_tables import grpc_status, http_status
from aenv_gateway.core.bulk import Outcome, SandboxFilter
from aenv_gateway.core.leases.operations import LeaseView, timestamp
from aenv_gateway.core.listing import PAUSED, RUNNING
from aenv_gateway.rest.json_fields import json_field, json_strings

# The create body's own rule for a map of strings (one rule for every body of the API).
from aenv_gateway.rest.schemas import _string_map, rfc3339

ACTIONS = {"kill": cluster_pb2.LEASE_EXPIRY_ACTION_KILL,
           "pause": cluster_pb2.LEASE_EXPIRY_ACTION_PAUSE}
ACTION_NAMES = {v: k for k, v in ACTIONS.items()}
STATES = {"running": RUNNING, "paused": PAUSED}


def parse_new_lease(body: Mapping[str, Any]) -> tuple[int, int, str, dict[str, str]]:
    """`POST /leases {ttlSeconds, onExpiry: kill|pause, name, metadata}`: (ttl, action, name,
    metadata); the service checks their bounds."""
    ttl = json_field(body, "ttlSeconds", int, required=True)
    action = json_field(body, "onExpiry", str) or "kill"
    if action not in ACTIONS:
        raise InvalidArgument("onExpiry must be kill or pause")
    return (ttl or 0, ACTIONS[action], json_field(body, "name", str) or "",
            _string_map(body, "metadata"))


def present_lease(view: LeaseView) -> dict[str, Any]:
    record = view.record
    return {
        "leaseID": record.lease_id,
        "name": record.name,
        "ttlSeconds": record.ttl_seconds,
        "onExpiry": ACTION_NAMES.get(record.on_expiry, "kill"),
        "metadata": dict(record.metadata),
        "createdAt": rfc3339(record.created_at),
        "expiresAt": rfc3339(timestamp(view.expires_at)),
        "sandboxCount": view.sandbox_count,
    }


def parse_filter(body: Mapping[str, Any]) -> SandboxFilter:
    """`{metadata: {...}, state: [running|paused], templateID, leaseID, all}`."""
    names = json_strings(body, "state")
    unknown = [n for n in names if n not in STATES]
    if unknown:
        raise InvalidArgument(f"unknown state {unknown[0]!r} (running, paused)")
    return SandboxFilter(
        metadata=_string_map(body, "metadata"),
        states=frozenset(STATES[n] for n in names),
        template=json_field(body, "templateID", str) or None,
        lease_id=json_field(body, "leaseID", str) or None,
        every=json_field(body, "all", bool) is True)


def present_outcome(outcome: Outcome) -> dict[str, Any]:
    """`code`: HTTP-style, as the batch create's items; `status`: the gRPC name."""
    err = outcome.error
    if err is None:
        return {"sandboxID": outcome.sandbox_id, "code": 200, "status": "OK", "message": ""}
    return {"sandboxID": outcome.sandbox_id, "code": http_status(err),
            "status": grpc_status(err).name, "message": err.message}

