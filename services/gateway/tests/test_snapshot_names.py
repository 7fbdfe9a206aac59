"""Snapshots named as E2B names them, through the REST and gRPC edges over the fake scheduler
and node agent: names parsed by E2B's rules, a name reused adds a build, sandboxes created by
name, tag or id, names shared with (and refused to) built templates, deletes by name and id."""

from __future__ import annotations

import grpc
import httpx
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.errors import InvalidArgument
from aenv_gateway.core.templates.records import NAMES, InMemoryTemplateRecords
from aenv_gateway.core.templates.snapshot_names import SnapshotName, parse_snapshot_name

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


@pytest.mark.parametrize(("text", "parsed"), [
    ("task", SnapshotName("task")),
    ("  My-Snap_2 ", SnapshotName("my-snap_2")),
    ("aenv/task:V1.2", SnapshotName("task", "v1.2", tagged=True)),
    ("task:default", SnapshotName("task", tagged=True)),
])
def test_names_parse_as_e2b_parses_them(text: str, parsed: SnapshotName) -> None:
    assert parse_snapshot_name(text) == parsed


@pytest.mark.parametrize(("text", "message"), [
    ("", "Invalid name: invalid template ID: "),
    ("bad name", "Invalid name: invalid template ID: bad name"),
    ("dotted.name", "Invalid name: invalid template ID: dotted.name"),
    ("task:bad tag", "Invalid name: invalid tag: bad tag"),
    ("Other Team/task", "Invalid name: invalid namespace: Other Team"),
    ("other/task", "namespace 'other' must match your team 'aenv'"),
])
def test_bad_names_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_snapshot_name(text)
    assert refused.value.message == message


async def _sandbox(http: httpx.AsyncClient, template: str = "base") -> httpx.Response:
    return await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": template})


async def _snapshot(http: httpx.AsyncClient, sid: str, name: str | None) -> httpx.Response:
    body = {} if name is None else {"name": name}
    return await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH, json=body)


async def _restores(stack: Stack, http: httpx.AsyncClient, template: str) -> str:
    """The node-side template a sandbox created from `template` restores."""
    created = await _sandbox(http, template)
    assert created.status_code == 201, (template, created.text)
    return stack.nodeagent.specs[-1].template_id


async def test_a_name_reused_adds_a_build_and_every_form_creates(stack: Stack) -> None:
    stack.scheduler.templates.update({"snap-1", "snap-2", "snap-3"})
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = (await _sandbox(http)).json()["sandboxID"]
        first = await _snapshot(http, sid, "Task")
        assert first.status_code == 201
        assert first.json() == {"snapshotID": "aenv/task:default", "names": ["aenv/task"]}
        assert list(stack.view.snapshot_records["snap-1"].names) == ["aenv/task"]
        for form in ("task", "task:default", "aenv/task", "aenv/task:default", "snap-1",
                     "snap-1:default"):
            assert await _restores(stack, http, form) == "snap-1", form
        created = await _sandbox(http, "aenv/task")
        template_id = created.json()["templateID"]
        assert template_id not in ("snap-1", "task") and created.json()["alias"] == "aenv/task"

        # Reused: a new build of the same snapshot template; the newest wins the tag.
        again = await _snapshot(http, sid, "task")
        assert again.json() == {"snapshotID": "aenv/task:default", "names": ["aenv/task"]}
        assert await _restores(stack, http, "task") == "snap-2"
        assert (await _sandbox(http, "task")).json()["templateID"] == template_id
        # The earlier build stays: by its id, and by its id as the tag (as E2B takes build ids).
        assert await _restores(stack, http, "snap-1") == "snap-1"
        assert await _restores(stack, http, "task:snap-1") == "snap-1"

        tagged = await _snapshot(http, sid, "task:v1")
        assert tagged.json() == {"snapshotID": "aenv/task:v1", "names": ["aenv/task"]}
        assert await _restores(stack, http, "task:v1") == "snap-3"
        assert await _restores(stack, http, "task") == "snap-2"
        listed = (await http.get("/snapshots", headers=AUTH)).json()
        assert listed == [{"snapshotID": "aenv/task:v1", "names": ["aenv/task"]}]  # newest tag
        by_tag = (await http.get("/snapshots?name=task:default", headers=AUTH)).json()
        assert by_tag == [{"snapshotID": "aenv/task:default", "names": ["aenv/task"]}]

        no_tag = await _sandbox(http, "task:v2")
        assert no_tag.status_code == 404
        assert no_tag.json()["message"] == "tag 'v2' does not exist for template 'task'"
        unknown = await _sandbox(http, "nothing")
        assert unknown.status_code == 404 and "nothing" in unknown.json()["message"]

        # Deleted by name: the template and every snapshot it holds; the name is free again.
        assert (await http.delete("/templates/aenv%2Ftask%3Av1", headers=AUTH)).status_code == 204
        assert stack.view.snapshot_records == {}
        assert isinstance(stack.templates, InMemoryTemplateRecords)
        assert stack.templates.templates == {} and (NAMES, "task") not in stack.templates.claims
        assert (await http.get("/snapshots", headers=AUTH)).json() == []
        gone = await http.delete("/templates/aenv%2Ftask", headers=AUTH)
        assert gone.status_code == 404


async def test_bad_names_are_400_before_any_capture(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = (await _sandbox(http)).json()["sandboxID"]
        for name, message in (("bad name!", "Invalid name: invalid template ID: bad name!"),
                              ("team/task", "namespace 'team' must match your team 'aenv'"),
                              ("", "Invalid name: invalid template ID: ")):
            refused = await _snapshot(http, sid, name)
            assert refused.status_code == 400 and refused.json()["message"] == message
        listed = await http.get("/snapshots?name=bad%20name", headers=AUTH)
        assert listed.status_code == 400
        assert stack.view.snapshot_records == {}


async def test_templates_and_snapshots_never_take_each_others_names(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        built = await http.post("/v3/templates", headers=AUTH, json={"name": "env"})
        assert built.status_code == 202, built.text
        sid = (await _sandbox(http)).json()["sandboxID"]
        taken = await _snapshot(http, sid, "env")
        assert taken.status_code == 409
        assert taken.json()["message"] == "name 'env' is already used by a template"
        assert stack.view.snapshot_records == {}  # refused before the capture

        assert (await _snapshot(http, sid, "snap-name")).status_code == 201
        build = await http.post("/v3/templates", headers=AUTH, json={"name": "snap-name"})
        assert build.status_code == 409
        assert build.json()["message"] == "name 'snap-name' is already used by a snapshot"
        # Snapshot templates are listed as snapshots, not as templates.
        names = [n for t in (await http.get("/templates", headers=AUTH)).json()
                 for n in t["names"]]
        assert "snap-name" not in names and "env" in names


async def test_a_snapshot_deleted_by_id_leaves_its_template(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = (await _sandbox(http)).json()["sandboxID"]
        for _ in range(2):
            assert (await _snapshot(http, sid, "kept")).status_code == 201
        async with grpc.aio.insecure_channel(
                f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
            md = (("x-api-key", API_KEY),)
            await stub.DeleteSnapshot(gateway_pb2.DeleteSnapshotRequest(snapshot_id="snap-2"),
                                      metadata=md)
            refused = await _sandbox(http, "kept")  # its tag went with its snapshot
            assert refused.status_code == 404
            assert refused.json()["message"] == "tag 'default' does not exist for template 'kept'"
            listed = (await http.get("/snapshots?name=kept", headers=AUTH)).json()
            assert listed == [{"snapshotID": "aenv/kept:default", "names": ["aenv/kept"]}]
            await stub.DeleteSnapshot(gateway_pb2.DeleteSnapshotRequest(snapshot_id="snap-1"),
                                      metadata=md)
        # The last one gone, the template goes and its name is free.
        assert (await http.get("/snapshots", headers=AUTH)).json() == []
        assert isinstance(stack.templates, InMemoryTemplateRecords)
        assert (NAMES, "kept") not in stack.templates.claims
        assert (await _snapshot(http, sid, "kept")).status_code == 201


async def test_reset_takes_e2b_snapshot_ids(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = (await _sandbox(http)).json()["sandboxID"]
        unnamed = (await _snapshot(http, sid, None)).json()["snapshotID"]
        named = (await _snapshot(http, sid, "rewind:v1")).json()["snapshotID"]
        assert (unnamed, named) == ("snap-1:default", "aenv/rewind:v1")
        for given in (unnamed, named, "snap-1"):
            reset = await http.post(f"/sandboxes/{sid}/reset", headers=AUTH,
                                    json={"snapshotID": given})
            assert reset.status_code == 200, reset.text
        assert stack.nodeagent.resets == [(sid, "snap-1"), (sid, "snap-2"), (sid, "snap-1")]
