"""The template API's tags and public templates through the official SDK 2.63 (its `AsyncTemplate`
and its generated client), as E2B's own template suite uses them: the built-in templates seen
as E2B's public defaults, the tag views, tag assignment and background builds."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, TypeVar

import httpx
import pytest
from e2b import AsyncTemplate
from e2b.api.client.api.tags import (
    get_templates_template_id_tags_count,
    get_templates_template_id_tags_exists,
    get_templates_template_id_tags_groups,
    get_templates_template_id_tags_tag_assignments,
)
from e2b.api.client.api.templates import get_default_templates
from e2b.api.client.models import Error
from e2b.api.client.models import GetTemplatesTemplateIDTagsGroupsSort as Sort
from e2b.api.client_async import get_api_client
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import TemplateException

from aenv.cluster.v1 import cluster_pb2

from . import test_template_sdk
from .conftest import API_KEY, Stack

# The stack of test_template_sdk.py: a gateway with a real snapstore, the SDK pointed at it.
snapstore_address = test_template_sdk.snapstore_address
tstack = test_template_sdk.tstack

pytestmark = pytest.mark.sdk
AUTH = {"X-API-Key": API_KEY}


def _publish_base(stack: Stack) -> None:
    """What a node agent publishes for its built-in `base` (node.py)."""
    record = cluster_pb2.TemplateRecord(
        template_id="base", aliases=["base"], envd_version="0.4.0",
        default_resources=cluster_pb2.Resources(vcpus=2, memory_mib=512, disk_mib=2048))
    record.created_at.GetCurrentTime()
    stack.templates.builtin_templates.append(record)  # type: ignore[attr-defined]


def _client() -> Any:
    return get_api_client(ConnectionConfig())


T = TypeVar("T")


def _ok(parsed: T | Error | None) -> T:
    """The SDK's parsed 200 answer (not its Error)."""
    assert parsed is not None and not isinstance(parsed, Error), parsed
    return parsed


async def test_the_builtin_templates_are_e2bs_public_defaults(tstack: Stack) -> None:
    _publish_base(tstack)
    assert await AsyncTemplate.exists("base") is True
    assert await AsyncTemplate.exists(f"nonexistent-{uuid.uuid4()}") is False
    tags = await AsyncTemplate.get_tags("base")
    assert [t.tag for t in tags] == ["default"] and tags[0].build_id
    defaults = await get_default_templates.asyncio_detailed(client=_client())
    assert defaults.status_code == 200
    [base] = _ok(defaults.parsed)
    assert (base.template_id, base.names, base.public, base.is_default) == (
        "base", ["base"], True, True)
    assert (base.cpu_count, base.memory_mb, base.build_status.value) == (2, 512, "ready")
    assert str(base.build_id) == str(tags[0].build_id)
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        assert (await http.get("/templates")).json() == []  # E2B lists a team's own only
        assert (await http.get("/templates/base")).json()["templateID"] == "base"
        refused = await http.delete("/templates/base")
        assert refused.status_code == 403
        assert refused.json()["message"] == "You don't have access to this sandbox template"
        count = await http.get("/templates/base/tags/count")
        assert count.status_code == 403
    with pytest.raises(TemplateException, match="You don't have access"):
        await AsyncTemplate.assign_tags("base:default", "mine")
    with pytest.raises(TemplateException, match="You don't have access"):
        await AsyncTemplate.remove_tags("base", "default")


async def test_the_tag_views_answer_as_e2bs(tstack: Stack) -> None:
    first = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo v1"), "views:v1")
    second = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo v2"), "views", tags=["v2"])
    client, name = _client(), first.template_id
    count = _ok(await get_templates_template_id_tags_count.asyncio(name, client=client))
    assert count.total == 3  # default, v1, v2

    async def exists(tag: str) -> bool:
        found = _ok(await get_templates_template_id_tags_exists.asyncio(
            name, client=client, tag=tag))
        assert found.normalized_tag == tag
        return bool(found.exists)

    assert await exists("v1") and not await exists("nope")
    page = _ok(await get_templates_template_id_tags_groups.asyncio(
        name, client=client, sort=Sort.NAME_ASC, tags_limit=2))
    assert [g.tag for g in page.tags] == ["default", "v1"]
    assert [str(a.build_id) for a in page.tags[1].assignments] == [first.build_id]
    assert isinstance(page.next_cursor, str)
    rest = _ok(await get_templates_template_id_tags_groups.asyncio(
        name, client=client, sort=Sort.NAME_ASC, tags_limit=2, tags_cursor=page.next_cursor))
    assert [g.tag for g in rest.tags] == ["v2"]
    assert rest.next_cursor is None and not rest.tags[0].has_more
    newest = _ok(await get_templates_template_id_tags_groups.asyncio(
        name, client=client, search="V"))
    assert {g.tag for g in newest.tags} == {"v1", "v2"}
    assert newest.tags[0].tag == "v2"  # latest first, E2B's default order
    mismatch = await get_templates_template_id_tags_groups.asyncio_detailed(
        name, client=client, sort=Sort.LATEST_ASC, tags_cursor=page.next_cursor)
    assert mismatch.status_code == 400 and b"different sort" in mismatch.content
    assigned = _ok(await get_templates_template_id_tags_tag_assignments.asyncio(
        name, "v2", client=client))
    assert assigned.next_cursor is None
    assert [str(a.build_id) for a in assigned.data] == [second.build_id]
    assert assigned.data[0].build_finished_at is not None
    unknown = _ok(await get_templates_template_id_tags_tag_assignments.asyncio(
        name, "gone", client=client))
    assert unknown.data == []
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        base = f"/templates/{name}/tags"
        for path, params in ((f"{base}/exists", {}), (f"{base}/groups", {"sort": "size"}),
                             (f"{base}/groups", {"tagsLimit": "x"}),
                             (f"{base}/v1/assignments", {"cursor": "yesterday"})):
            assert (await http.get(path, params=params)).status_code == 400, (path, params)
        assert (await http.get("/templates/no-such/tags/count")).status_code == 404


async def test_the_e2b_suites_tag_flows(tstack: Stack) -> None:
    """E2B's `test_tags_integration` and `test_exists`, in SDK 2.63's words."""
    alias = f"e2b-tags-test-{uuid.uuid4().hex[:8]}"
    built = await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3"), f"{alias}:v1.0",
                                      cpu_count=1, memory_mb=1024, skip_cache=True)
    assert built.build_id and built.template_id
    info = await AsyncTemplate.assign_tags(f"{alias}:v1.0", ["production", "latest"])
    assert info.build_id == built.build_id and info.tags == ["production", "latest"]
    assert await AsyncTemplate.exists(f"{alias}:production")
    await AsyncTemplate.remove_tags(alias, "production")
    assert not await AsyncTemplate.exists(f"{alias}:production")
    with pytest.raises(TemplateException):
        await AsyncTemplate.remove_tags(alias, "nonexistent-tag")
    assert {t.tag for t in await AsyncTemplate.get_tags(alias)} == {"v1.0", "latest"}
    single = await AsyncTemplate.assign_tags(f"{alias}:v1.0", "stable")
    assert single.tags == ["stable"] and single.build_id == built.build_id


async def test_a_background_build_reports_building_then_ready(tstack: Stack) -> None:
    tstack.nodeagent.build_gate = gate = asyncio.Event()
    template = AsyncTemplate().from_image("alpine:3").skip_cache().run_cmd("sleep 5")
    info = await AsyncTemplate.build_in_background(template, "e2b-test:v1", cpu_count=1,
                                                   memory_mb=1024)
    await asyncio.wait_for(tstack.nodeagent.build_started.wait(), 30)
    assert (await AsyncTemplate.get_build_status(info)).status.value == "building"
    gate.set()
    for _ in range(100):
        status = await AsyncTemplate.get_build_status(info)
        if status.status.value != "building":
            break
        await asyncio.sleep(0.1)
    assert status.status.value == "ready"
    assert await AsyncTemplate.exists("e2b-test:v1")


async def test_a_tag_pushed_again_is_built_anew_an_unchanged_one_is_reused(
    tstack: Stack,
) -> None:
    template = AsyncTemplate().from_image("registry.test/app:1").run_cmd("echo on it")
    node = tstack.nodeagent
    node.image_digests["registry.test/app:1"] = "sha256:" + "1" * 64
    first = await AsyncTemplate.build(template, "retagged")
    lines: list[str] = []
    await AsyncTemplate.build(template, "retagged",
                              on_build_logs=lambda entry: lines.append(entry.message))
    assert len(node.builds) == 1  # the tag still names the same image: the build is reused
    assert any(f"registry.test/app:1 is sha256:{'1' * 64}" in m for m in lines)
    node.image_digests["registry.test/app:1"] = "sha256:" + "2" * 64  # pushed again
    second = await AsyncTemplate.build(template, "retagged")
    assert len(node.builds) == 2 and second.build_id != first.build_id
    tags = {t.tag: t.build_id for t in await AsyncTemplate.get_tags("retagged")}
    assert tags == {"default": second.build_id}
    assert node.resolved == ["registry.test/app:1"] * 3
    pinned = AsyncTemplate().from_image(f"registry.test/app@sha256:{'2' * 64}")
    await AsyncTemplate.build(pinned, "pinned")
    assert len(node.resolved) == 3  # a digest is what it names: nothing to ask a node
