"""The rest of SDK 2.63's template routes through its generated client: the v2 listing and a
template's builds a page at a time, a build's logs by cursor, direction and level, and the
fields that mean nothing here (`teamID`, `public`) refused with a 400 naming them."""

from __future__ import annotations

import httpx
import pytest
from e2b import AsyncTemplate
from e2b.api.client.api.templates import (
    get_templates_template_id,
    get_templates_template_id_builds_build_id_logs,
    get_v2_templates,
    patch_templates_template_id,
    patch_v_2_templates_template_id,
)
from e2b.api.client.models import LogLevel, LogsDirection, TemplateUpdateRequest

from . import test_template_tags_sdk as tags_sdk
from .conftest import Stack
from .test_template_tags_sdk import AUTH, _client, _ok

snapstore_address, tstack = tags_sdk.snapstore_address, tags_sdk.tstack  # its fixtures
pytestmark = pytest.mark.sdk


async def test_listings_come_a_page_at_a_time(tstack: Stack) -> None:
    built = [await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3").run_cmd(
        f"echo {n}"), name) for n, name in enumerate(("paged-a", "paged-b", "paged-c"))]
    client = _client()
    first = await get_v2_templates.asyncio_detailed(client=client, limit=2)
    assert [t.names for t in _ok(first.parsed)] == [["paged-a"], ["paged-b"]]
    token = first.headers["x-next-token"]
    rest = await get_v2_templates.asyncio_detailed(client=client, limit=2, next_token=token)
    assert [t.names for t in _ok(rest.parsed)] == [["paged-c"]]
    assert "x-next-token" not in rest.headers
    again = await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3").run_cmd(
        "echo again"), "paged-a")
    one = await get_templates_template_id.asyncio_detailed(
        built[0].template_id, client=client, limit=1)
    assert [str(b.build_id) for b in _ok(one.parsed).builds] == [again.build_id]  # newest
    older = await get_templates_template_id.asyncio_detailed(
        built[0].template_id, client=client, limit=1, next_token=one.headers["x-next-token"])
    assert [str(b.build_id) for b in _ok(older.parsed).builds] == [built[0].build_id]


async def test_a_builds_logs_by_cursor_direction_and_level(tstack: Stack) -> None:
    built = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo one").run_cmd("echo two"), "logs")
    client = _client()

    async def logs(**query: object) -> list[str]:
        found = _ok(await get_templates_template_id_builds_build_id_logs.asyncio(
            built.template_id, built.build_id, client=client, **query))  # type: ignore[arg-type]
        return [entry.message for entry in found.logs]

    forward = await logs()
    assert len(forward) >= 4 and any("RUN echo one" in m for m in forward)
    assert await logs(direction=LogsDirection.BACKWARD) == forward[::-1]
    assert await logs(limit=2) == forward[:2]
    assert await logs(level=LogLevel.ERROR) == []
    late = await logs(cursor=2**41)  # a time past every entry
    assert late == [] and await logs(cursor=0) == forward
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        route = f"/templates/{built.template_id}/builds/{built.build_id}/logs"
        for bad in ({"direction": "up"}, {"source": "elsewhere"}, {"cursor": "soon"}):
            assert (await http.get(route, params=bad)).status_code == 400, bad


async def test_fields_without_meaning_here_are_refused_by_name(tstack: Stack) -> None:
    built = await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3"), "fields")
    client = _client()
    public = await patch_templates_template_id.asyncio_detailed(
        built.template_id, client=client, body=TemplateUpdateRequest(public=True))
    assert public.status_code == 400 and b"public" in public.content
    same = await patch_v_2_templates_template_id.asyncio_detailed(
        built.template_id, client=client, body=TemplateUpdateRequest())
    assert same.status_code == 200 and _ok(same.parsed).names == ["fields"]
    teams = await get_v2_templates.asyncio_detailed(client=client, team_id="prj_x")
    assert teams.status_code == 400 and b"teamID" in teams.content
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        asked = await http.post("/v3/templates", json={"name": "teamed", "teamID": "t1"})
        assert asked.status_code == 400 and "teamID" in asked.json()["message"]
        assert (await http.get("/templates", params={"teamID": "t1"})).status_code == 400
