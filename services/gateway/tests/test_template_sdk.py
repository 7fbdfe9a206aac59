"""The official SDK's template API (`AsyncTemplate.build`, `exists`, tags) against the gateway,
over a fake node agent that streams a build as the real one does, and a real snapstore holding
the COPY contexts the SDK uploads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from e2b import AsyncSandbox, AsyncTemplate, BuildException
from e2b.template.logger import LogEntry

from aenv.cluster.v1 import cluster_pb2
from aenv.snapstore.v1 import snapstore_pb2
from aenv_common.snapshots import snapstore_stub
from aenv_gateway.core.templates.records import InMemoryTemplateRecords
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore

from .conftest import API_KEY, Stack, running_stack

pytestmark = pytest.mark.sdk
AUTH = {"X-API-Key": API_KEY}


@pytest.fixture
async def snapstore_address(tmp_path: Path) -> AsyncIterator[str]:
    snapstore = await start_snapstore(SnapstoreSettings(
        listen="127.0.0.1:0", gc_interval_seconds=0, fs_root=tmp_path / "store",
        volume_nfs_listen="127.0.0.1:0", volume_work_dir=tmp_path / "volumes"))
    try:
        yield f"127.0.0.1:{snapstore.port}"
    finally:
        await snapstore.stop(grace=0)


@pytest.fixture
async def tstack(snapstore_address: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    async with running_stack(snapstore_address=snapstore_address) as stack:
        monkeypatch.setenv("E2B_API_KEY", API_KEY)
        monkeypatch.setenv("E2B_API_URL", stack.url)
        monkeypatch.setenv("E2B_SANDBOX_URL", stack.url)
        yield stack


def _context(tmp_path: Path) -> Path:
    context = tmp_path / "context"
    (context / "app").mkdir(parents=True)
    (context / "app" / "main.py").write_text("print('hi')\n")
    return context


async def test_a_template_builds_from_an_image_and_sandboxes_start_from_it(
    tstack: Stack, tmp_path: Path
) -> None:
    template = (
        AsyncTemplate(file_context_path=_context(tmp_path))
        .from_image("registry.test/app:1")
        .copy("app", "/srv/app")
        .run_cmd("echo built")
        .set_envs({"MODE": "test"})
        .set_start_cmd("python -m http.server 8000", "curl -sf localhost:8000")
    )
    lines: list[LogEntry] = []
    info = await AsyncTemplate.build(template, "web-app", cpu_count=2, memory_mb=1024,
                                     min_free_disk_mb=512, on_build_logs=lines.append)
    request = tstack.nodeagent.builds[-1]
    assert request.from_image == "registry.test/app:1"
    assert [s.type for s in request.steps][-3:] == ["COPY", "RUN", "ENV"]
    copy = next(s for s in request.steps if s.type == "COPY")
    assert copy.files_hash and request.start_cmd.startswith("python -m http.server")
    assert request.resources.vcpus == 2 and request.resources.memory_mib == 1024
    assert request.min_free_disk_mib == 512 and not request.resources.disk_mib
    messages = [entry.message for entry in lines]
    assert any(m.startswith("Uploaded") for m in messages)  # the context went to snapstore
    assert any("RUN echo built" in m for m in messages)      # the node's lines reached the SDK
    assert await AsyncTemplate.exists("web-app") and not await AsyncTemplate.exists("no-such")

    sandbox = await AsyncSandbox.create("web-app")
    # The node restores the build; E2B's API names the template (the SDK's), as E2B does.
    assert tstack.nodeagent.specs[-1].template_id == request.template_id == info.build_id
    got = await sandbox.get_info()
    assert got.template_id == info.template_id != info.build_id
    assert got.name == "web-app"  # the name it was created by
    listed = await AsyncSandbox.list().next_items()
    assert [(s.template_id, s.name) for s in listed] == [(info.template_id, "web-app")]
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        created = (await http.post("/sandboxes", json={"templateID": "web-app"})).json()
        assert created["templateID"] == info.template_id and created["alias"] == "web-app"
        for name in (info.template_id, "web-app", info.build_id):  # any of its names
            found = (await http.get("/v2/sandboxes", params={"template": name})).json()
            assert [s["templateID"] for s in found] == [info.template_id] * 2, name
        assert [s["templateID"] for s in (await http.get("/sandboxes")).json()] == [
            info.template_id] * 2
        await http.delete(f"/sandboxes/{created['sandboxID']}")

    # The same files again: the SDK is told they are present and uploads nothing.
    again: list[LogEntry] = []
    await AsyncTemplate.build(template, "web-app", cpu_count=2, memory_mb=1024,
                              min_free_disk_mb=512, on_build_logs=again.append)
    assert any("already cached" in entry.message for entry in again)
    await sandbox.kill()


async def test_unchanged_inputs_reuse_the_build_unless_the_cache_is_skipped(
    tstack: Stack,
) -> None:
    template = AsyncTemplate().from_image("alpine:3").run_cmd("echo once")
    first = await AsyncTemplate.build(template, "cached")
    second = await AsyncTemplate.build(template, "cached")
    assert len(tstack.nodeagent.builds) == 1
    assert first.build_id != second.build_id
    await AsyncTemplate.build(template, "cached", skip_cache=True)
    assert len(tstack.nodeagent.builds) == 2


async def test_concurrent_builds_of_the_same_template_build_once(tstack: Stack) -> None:
    tstack.nodeagent.build_gate = gate = asyncio.Event()
    template = AsyncTemplate().from_image("alpine:3").run_cmd("echo many")
    builds = [asyncio.ensure_future(AsyncTemplate.build(template, "shared"))
              for _ in range(3)]
    await asyncio.wait_for(tstack.nodeagent.build_started.wait(), 30)
    await asyncio.sleep(0.5)  # the other two ask meanwhile: they follow the one in flight
    gate.set()
    infos = await asyncio.gather(*builds)
    assert len(tstack.nodeagent.builds) == 1 and len({i.build_id for i in infos}) == 3
    sandbox = await AsyncSandbox.create("shared")
    assert tstack.nodeagent.specs[-1].template_id == tstack.nodeagent.builds[0].template_id
    await sandbox.kill()


async def test_a_failed_step_is_reported_and_the_previous_version_stays(tstack: Stack) -> None:
    good = AsyncTemplate().from_image("alpine:3").run_cmd("echo good")
    built = await AsyncTemplate.build(good, "keeps")
    bad = AsyncTemplate().from_image("alpine:3").run_cmd("echo fine").run_cmd("false")
    with pytest.raises(BuildException, match=r"step 2 \(RUN\): exited with code 1"):
        await AsyncTemplate.build(bad, "keeps")
    status = await _status(tstack, "keeps")
    assert status["status"] == "error" and status["reason"] == {
        "message": "step 2 (RUN): exited with code 1", "step": "2",
        "logEntries": [status["logEntries"][-1]]}
    sandbox = await AsyncSandbox.create("keeps")
    assert tstack.nodeagent.specs[-1].template_id == built.build_id
    await sandbox.kill()


async def test_the_build_status_pages_its_log(tstack: Stack) -> None:
    steps = AsyncTemplate().from_image("alpine:3").run_cmd("echo one").run_cmd("echo two")
    built = await AsyncTemplate.build(steps, "paged")
    route = f"/templates/{built.template_id}/builds/{built.build_id}/status"
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        whole = (await http.get(route)).json()["logEntries"]
        assert len(whole) >= 4
        first = (await http.get(route, params={"limit": 2})).json()
        rest = (await http.get(route, params={"logsOffset": 2})).json()
        assert first["logEntries"] == whole[:2] and rest["logEntries"] == whole[2:]
        assert len(first["logs"]) == 2 and first["logs"][0].endswith(whole[0]["message"])
        middle = (await http.get(route, params={"logsOffset": 1, "limit": 1})).json()
        assert middle["logEntries"] == whole[1:2]
        assert (await http.get(route, params={"logsOffset": len(whole)})).json()[
            "logEntries"] == []
        for bad in ({"logsOffset": -1}, {"limit": "x"}):
            assert (await http.get(route, params=bad)).status_code == 400


async def test_tags_pick_builds(tstack: Stack) -> None:
    v1 = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo v1"), "tagged:v1")
    v2 = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo v2"), "tagged", tags=["v2"])
    tags = {t.tag: t.build_id for t in await AsyncTemplate.get_tags("tagged")}
    assert tags == {"v1": v1.build_id, "default": v2.build_id, "v2": v2.build_id}
    await AsyncTemplate.assign_tags("tagged:v1", "stable")
    await AsyncSandbox.create("tagged:stable")
    assert tstack.nodeagent.specs[-1].template_id == v1.build_id
    await AsyncTemplate.remove_tags("tagged", "stable")
    with pytest.raises(Exception, match="tag 'stable' does not exist for template 'tagged'"):
        await AsyncSandbox.create("tagged:stable")
    await AsyncSandbox.create(f"tagged:{v1.build_id}")  # as E2B: a tag may be a build id
    assert tstack.nodeagent.specs[-1].template_id == v1.build_id
    with pytest.raises(Exception, match="no tag"):
        await AsyncTemplate.remove_tags("tagged", "stable")


async def test_from_template_builds_on_the_parents_build(tstack: Stack) -> None:
    parent = await AsyncTemplate.build(
        AsyncTemplate().from_image("alpine:3").run_cmd("echo parent"), "parent")
    await AsyncTemplate.build(
        AsyncTemplate().from_template("parent").run_cmd("echo child"), "child")
    assert tstack.nodeagent.builds[-1].from_template == parent.build_id


async def test_listing_getting_and_deleting_templates(tstack: Stack) -> None:
    info = await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3"), "listed")
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        listed = (await http.get("/templates")).json()
        assert [t["names"] for t in listed] == [["listed"]]
        assert listed[0]["buildStatus"] == "ready" and listed[0]["cpuCount"] == 2
        one = (await http.get(f"/templates/{info.template_id}")).json()
        assert [b["buildID"] for b in one["builds"]] == [info.build_id]
        assert (await http.get("/templates/aliases/listed")).json() == {
            "templateID": info.template_id, "public": False}
        assert (await http.delete("/templates/listed")).status_code == 204
        assert (await http.get("/templates/aliases/listed")).status_code == 404
        assert (await http.get("/templates")).json() == []
    assert _memory(tstack).builds == {} and _memory(tstack).claims == {}


async def test_deleting_a_template_retires_the_images_no_other_template_uses(
    tstack: Stack, snapstore_address: str,
) -> None:
    image = AsyncTemplate().from_image("alpine:3").run_cmd("echo shared")
    first = await AsyncTemplate.build(image, "first")
    await AsyncTemplate.build(image, "second")  # equal inputs: reuses the first's image
    own = await AsyncTemplate.build(AsyncTemplate().from_image("alpine:3"), "own")
    channel = grpc.aio.insecure_channel(snapstore_address)
    stub = snapstore_stub(channel)
    try:
        # As the building node pushes them (the fake node does not).
        for image_id in (first.build_id, own.build_id):
            for name in (f"template-{image_id}", f"template-{image_id}-key0"):
                await stub.PutManifest(snapstore_pb2.PutManifestRequest(
                    manifest=snapstore_pb2.Manifest(snapshot_id=name)))

        async def manifests() -> list[str]:
            listed = await stub.ListManifests(snapstore_pb2.ListManifestsRequest())
            return sorted(m for m in listed.snapshot_ids if m.startswith("template-"))

        async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
            assert (await http.delete("/templates/first")).status_code == 204
            assert _memory(tstack).dropped_node_templates == []  # "second" stands on it
            assert (await http.delete("/templates/own")).status_code == 204
            assert _memory(tstack).dropped_node_templates == [own.build_id]
            assert await manifests() == [f"template-{first.build_id}",
                                         f"template-{first.build_id}-key0"]
            assert (await http.delete("/templates/second")).status_code == 204
        assert _memory(tstack).dropped_node_templates == [own.build_id, first.build_id]
        assert await manifests() == []
    finally:
        await channel.close()


async def test_bad_requests_get_clear_errors(tstack: Stack) -> None:
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        bad_name = await http.post("/v3/templates", json={"name": "Not Valid"})
        assert bad_name.status_code == 400 and "invalid template name" in bad_name.text
        assert (await http.post("/v3/templates", json={})).status_code == 400
        small = await http.post("/v3/templates", json={"name": "x", "memoryMB": 64})
        assert small.status_code == 400 and "memoryMB" in small.text
        asked = (await http.post("/v3/templates", json={"alias": "legacy"})).json()
        assert asked["names"] == ["legacy"] and asked["tags"] == ["default"]
        tid, bid = asked["templateID"], asked["buildID"]
        both = await http.post(f"/v2/templates/{tid}/builds/{bid}",
                               json={"fromImage": "a", "fromTemplate": "b"})
        assert both.status_code == 400
        cloud = await http.post(f"/v2/templates/{tid}/builds/{bid}", json={
            "fromImage": "a", "fromImageRegistry": {"type": "aws", "awsAccessKeyId": "k"}})
        assert cloud.status_code == 400 and "not supported" in cloud.text
        start = {"fromImage": "alpine:3", "steps": []}
        assert (await http.post(f"/v2/templates/{tid}/builds/{bid}", json=start)).status_code \
            == 202
        twice = await http.post(f"/v2/templates/{tid}/builds/{bid}", json=start)
        assert twice.status_code == 409
        unknown = await http.get(f"/templates/{tid}/builds/{'0' * 8}/status")
        assert unknown.status_code == 404
        link = (await http.get(f"/templates/{tid}/files/{'ab' * 32}")).json()
        assert link["present"] is False
        forged = link["url"].replace("signature=", "signature=0")
        assert (await http.put(forged, content=b"x")).status_code == 403
        assert (await http.get(f"/templates/{tid}/files/not-hex")).status_code == 400
        assert (await http.get("/templates", headers={"X-API-Key": "wrong"})).status_code \
            == 401


async def test_a_build_its_gateway_left_is_reported_interrupted(tstack: Stack) -> None:
    async with httpx.AsyncClient(base_url=tstack.url, headers=AUTH) as http:
        asked = (await http.post("/v3/templates", json={"name": "orphan"})).json()
        tid, bid = asked["templateID"], asked["buildID"]
        # As another gateway that stopped mid-build left it: building, last written long ago.
        record = _memory(tstack).builds[bid]
        record.status = cluster_pb2.BUILD_STATUS_BUILDING
        record.updated_at.FromSeconds(int(time.time()) - 3600)
        status = (await http.get(f"/templates/{tid}/builds/{bid}/status")).json()
        assert status["status"] == "error"
        assert "interrupted" in status["reason"]["message"]
        assert _memory(tstack).builds[bid].status == cluster_pb2.BUILD_STATUS_ERROR


def _memory(stack: Stack) -> InMemoryTemplateRecords:
    assert isinstance(stack.templates, InMemoryTemplateRecords)
    return stack.templates


async def _status(stack: Stack, name: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=stack.url, headers=AUTH) as http:
        template = (await http.get(f"/templates/aliases/{name}")).json()["templateID"]
        latest = (await http.get(f"/templates/{template}")).json()["buildID"]
        status: dict[str, Any] = (
            await http.get(f"/templates/{template}/builds/{latest}/status")).json()
        return status
