"""Events on the wire: E2B's lifecycle event JSON (its events API) and aenv's own (the SSE
stream), both from one SandboxEvent.

E2B's event: id, version, type (`sandbox.lifecycle.*`), eventData, sandboxBuildId,
sandboxExecutionId, sandboxId, sandboxTeamId, sandboxTemplateId, timestamp. aenv has no builds
apart from its templates (sandboxBuildId is empty), one execution per sandbox id (the sandbox id
stands for it) and keys instead of teams (the owner key id stands for the team). eventData keeps
E2B's `sandbox_metadata` and adds aenv's words under `aenv_*` names E2B does not use.

Only types E2B has a name for are served on its routes: `ready` and `forked` have none, and
`lost` is not E2B's `killed` (a lost sandbox may come back with its node), so those three stay
on aenv's own API.
"""

from __future__ import annotations

from typing import Any

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import InvalidArgument
from aenv_common.events import CAUSE_NAMES, E2B_NAMES, TYPE_NAMES, cause_name, e2b_event_type

E2B_EVENT_VERSION = "v2"

def e2b_names(names: list[str]) -> frozenset[str]:
    """The E2B names asked for (every one E2B has when none are given).

    :raise InvalidArgument: a name E2B does not have.
    """
    unknown = [n for n in names if n not in E2B_NAMES]
    if unknown:
        raise InvalidArgument(
            f"unknown event type {unknown[0]!r} (one of {', '.join(sorted(E2B_NAMES))})")
    return frozenset(names) or E2B_NAMES


TYPES_BY_NAME: dict[str, int] = {name: t for t, name in TYPE_NAMES.items()}


def native_types(names: list[str]) -> frozenset[int]:
    """:raise InvalidArgument: a name that is no aenv event type."""
    unknown = [n for n in names if n not in TYPES_BY_NAME]
    if unknown:
        raise InvalidArgument(
            f"unknown event type {unknown[0]!r} (one of {', '.join(TYPE_NAMES.values())})")
    return frozenset(TYPES_BY_NAME[n] for n in names)


def timestamp(event: c.SandboxEvent) -> str:
    return str(event.time.ToJsonString())


def e2b_event(event: c.SandboxEvent) -> dict[str, Any]:
    """An event as E2B's events API answers it (E2B-served types only)."""
    data: dict[str, Any] = {"aenv_type": TYPE_NAMES.get(event.type, "unknown")}
    if event.metadata:
        data["sandbox_metadata"] = dict(event.metadata)
    data.update(_aenv_fields(event, "aenv_"))
    return {
        "id": event.event_id,
        "version": E2B_EVENT_VERSION,
        "type": e2b_event_type(event),
        "eventData": data,
        "sandboxBuildId": "",
        "sandboxExecutionId": event.sandbox_id,
        "sandboxId": event.sandbox_id,
        "sandboxTeamId": event.owner_key_id,
        "sandboxTemplateId": event.template_id,
        "timestamp": timestamp(event),
    }


def native_event(event: c.SandboxEvent) -> dict[str, Any]:
    """An event in aenv's own JSON (the SSE stream's `data:`)."""
    body: dict[str, Any] = {
        "id": event.event_id,
        "type": TYPE_NAMES.get(event.type, "unknown"),
        "sandboxId": event.sandbox_id,
        "templateId": event.template_id,
        "metadata": dict(event.metadata),
        "timestamp": timestamp(event),
    }
    body.update(_aenv_fields(event, ""))
    return body


def _aenv_fields(event: c.SandboxEvent, prefix: str) -> dict[str, Any]:
    """What aenv adds, each only when it has a value (`cause` only with one)."""
    fields: dict[str, Any] = {}
    if event.cause in CAUSE_NAMES:
        fields["cause"] = cause_name(event.cause)
    for name, value in (("detail", event.detail), ("node_id", event.node_id),
                        ("lease_id", event.lease_id), ("trace_id", event.trace_id)):
        if value:
            fields[name] = value
    if event.related_sandbox_ids:
        fields["related_sandbox_ids"] = list(event.related_sandbox_ids)
    if not prefix:
        return {_camel(k): v for k, v in fields.items()}
    return {prefix + k: v for k, v in fields.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
