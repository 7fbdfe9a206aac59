"""E2B template API JSON <-> catalog types: what the SDKs send (`TemplateBuildRequestV3`,
`TemplateBuildStartV2`, tag requests) and the shapes they parse back. Pure.

Every validation failure is an InvalidArgument (HTTP 400).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_gateway.core.templates.build_spec import BuildStart, StepSpec
from aenv_gateway.core.templates.catalog import TagInfo
from aenv_gateway.core.templates.names import TemplateName, parse_name
from aenv_gateway.core.templates.records import BuildRecord, CatalogTemplate
from aenv_gateway.rest.schemas import json_field, json_strings, rfc3339

MAX_VCPUS = 64
MIN_MEMORY_MIB, MAX_MEMORY_MIB = 128, 65536
MAX_DISK_MIB = 1 << 20
_STATUS = {
    cluster_pb2.BUILD_STATUS_WAITING: "waiting",
    cluster_pb2.BUILD_STATUS_BUILDING: "building",
    cluster_pb2.BUILD_STATUS_READY: "ready",
    cluster_pb2.BUILD_STATUS_ERROR: "error",
}


# E2B's `teamID` (of a request or a listing): aenv has no teams to pick from.
NO_TEAMS = ("teamID: this platform has no teams; every API key sees every template, leave "
            "teamID out")


@dataclass(frozen=True)
class BuildAsk:
    name: TemplateName
    tags: list[str]
    resources: cluster_pb2.Resources
    min_free_disk_mib: int | None = None


def parse_build_request(body: Mapping[str, Any]) -> BuildAsk:
    """TemplateBuildRequestV3: `name` (or the older `alias`), `tags`, `cpuCount`, `memoryMB`,
    `minFreeDiskMb`; `teamID` is refused (NO_TEAMS)."""
    if json_field(body, "teamID", str):
        raise InvalidArgument(NO_TEAMS)
    name, alias = json_field(body, "name", str), json_field(body, "alias", str)
    if alias is not None:  # the older field, still checked when a name overrides it
        parse_name(alias)
    chosen = parse_name(name if name is not None else alias or "")
    cpus = json_field(body, "cpuCount", int)
    memory = json_field(body, "memoryMB", int)
    disk = json_field(body, "minFreeDiskMb", int)
    if cpus is not None and not 1 <= cpus <= MAX_VCPUS:
        raise InvalidArgument(f"cpuCount must be between 1 and {MAX_VCPUS}")
    if memory is not None and (not MIN_MEMORY_MIB <= memory <= MAX_MEMORY_MIB or memory % 2):
        raise InvalidArgument(
            f"memoryMB must be an even number between {MIN_MEMORY_MIB} and {MAX_MEMORY_MIB}")
    if disk is not None and not 0 <= disk <= MAX_DISK_MIB:
        raise InvalidArgument(f"minFreeDiskMb must be between 0 and {MAX_DISK_MIB}")
    return BuildAsk(chosen, json_strings(body, "tags"), cluster_pb2.Resources(
        vcpus=cpus or 0, memory_mib=memory or 0), disk)


def parse_build_start(body: Mapping[str, Any]) -> BuildStart:
    image = json_field(body, "fromImage", str) or None
    parent = json_field(body, "fromTemplate", str) or None
    if (image is None) == (parent is None):
        raise InvalidArgument("exactly one of fromImage and fromTemplate must be given")
    steps = json_field(body, "steps", list) or []
    parsed = tuple(_step(number, step) for number, step in enumerate(steps, start=1))
    return BuildStart(
        from_image=image, from_template=parent, steps=parsed,
        start_cmd=json_field(body, "startCmd", str) or "",
        ready_cmd=json_field(body, "readyCmd", str) or "",
        force=bool(json_field(body, "force", bool)) or any(s.force for s in parsed),
        login=_login(json_field(body, "fromImageRegistry", dict)),
    )


def _step(number: int, step: object) -> StepSpec:
    if not isinstance(step, dict):
        raise InvalidArgument(f"step {number}: must be an object")
    kind = json_field(step, "type", str, required=True)
    assert kind is not None
    return StepSpec(kind, tuple(json_strings(step, "args")),
                    json_field(step, "filesHash", str) or "",
                    bool(json_field(step, "force", bool)))


def _login(registry: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """GeneralRegistry (`type: registry`, username, password); the cloud registries' own
    credentials (AWS, GCP) need their SDKs, which no node has."""
    if registry is None:
        return None
    kind = json_field(registry, "type", str)
    if kind != "registry":
        raise InvalidArgument(f"fromImageRegistry of type {kind!r} is not supported: use "
                              "type 'registry' with a username and password")
    username = json_field(registry, "username", str, required=True)
    password = json_field(registry, "password", str, required=True)
    assert username is not None and password is not None
    return username, password


def parse_tags_request(body: Mapping[str, Any], target_field: str) -> tuple[str, list[str]]:
    target = json_field(body, target_field, str, required=True)
    assert target is not None
    return target, json_strings(body, "tags")


def present_requested(template: CatalogTemplate, build: BuildRecord) -> dict[str, Any]:
    """TemplateRequestResponseV3."""
    return {"templateID": template.template_id, "buildID": build.build_id, "public": False,
            "names": list(template.names), "tags": list(build.tags),
            "aliases": list(template.names)}


def present_entry(entry: cluster_pb2.BuildLogEntry) -> dict[str, Any]:
    shown: dict[str, Any] = {"timestamp": rfc3339(entry.time), "level": entry.level or "info",
                             "message": entry.message}
    if entry.step:
        shown["step"] = entry.step
    return shown


def present_status(
    build: BuildRecord, entries: Sequence[cluster_pb2.BuildLogEntry]
) -> dict[str, Any]:
    """TemplateBuildInfo: this page of the log (also as plain lines), and the failure."""
    shown: dict[str, Any] = {
        "templateID": build.template_id, "buildID": build.build_id,
        "status": _STATUS[build.status],
        "logEntries": [present_entry(e) for e in entries],
        "logs": [f"[{rfc3339(e.time)}] {e.message}" for e in entries],
    }
    if build.status == cluster_pb2.BUILD_STATUS_ERROR:
        failed = [e for e in build.logs if e.level == "error"]
        shown["reason"] = {"message": build.reason, "step": build.reason_step,
                           "logEntries": [present_entry(e) for e in failed]}
    return shown


def present_template(
    template: CatalogTemplate, latest: BuildRecord | None, default_version: str
) -> dict[str, Any]:
    """Template (`GET /templates`)."""
    r = template.resources
    return {
        "templateID": template.template_id,
        "buildID": template.latest_build_id,
        "cpuCount": r.vcpus, "memoryMB": r.memory_mib, "diskSizeMB": r.disk_mib,
        "public": False, "aliases": list(template.names), "names": list(template.names),
        "createdAt": rfc3339(template.created_at), "updatedAt": rfc3339(template.updated_at),
        "createdBy": None, "lastSpawnedAt": None, "spawnCount": 0,
        "buildCount": template.build_count,
        "envdVersion": (latest.envd_version if latest else "") or default_version,
        "buildStatus": _STATUS.get(latest.status, "waiting") if latest else "waiting",
    }


def present_build(build: BuildRecord, default_version: str) -> dict[str, Any]:
    """TemplateBuild (in `GET /templates/{id}`)."""
    r = build.resources
    shown: dict[str, Any] = {
        "buildID": build.build_id, "status": _STATUS[build.status],
        "createdAt": rfc3339(build.created_at),
        "updatedAt": rfc3339(build.finished_at if build.HasField("finished_at")
                             else build.created_at),
        "cpuCount": r.vcpus, "memoryMB": r.memory_mib, "diskSizeMB": r.disk_mib,
        "envdVersion": build.envd_version or default_version,
    }
    if build.HasField("finished_at"):
        shown["finishedAt"] = rfc3339(build.finished_at)
    return shown


def present_tag(info: TagInfo) -> dict[str, Any]:
    return {"tag": info.tag, "buildID": info.build_id, "createdAt": rfc3339(info.created_at)}
