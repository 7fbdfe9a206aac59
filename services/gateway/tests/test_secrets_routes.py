"""The Secret API's routes (E2B SDK 2.63 `Secret`): exact statuses and bodies, paging, one
key's secrets invisible to another, values never answered or logged; and the owner key a
create records (REST and gRPC)."""

from __future__ import annotations

import logging

import grpc
import httpx
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc

from .conftest import API_KEY, Stack

ADMIN = {"X-API-Key": API_KEY}
VALUE = "sk-test-7c0ffee-never-shown"


async def _second_key(http: httpx.AsyncClient) -> tuple[str, dict[str, str]]:
    created = (await http.post("/admin/keys", headers=ADMIN, json={"name": "other"})).json()
    return created["keyID"], {"X-API-Key": created["key"]}


async def test_secret_lifecycle_as_the_sdk_sees_it(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await http.post("/secrets", headers=ADMIN, json={
            "name": "OpenAI-Key", "value": VALUE, "metadata": {"team": "ml"}})
        assert created.status_code == 201, created.text
        body = created.json()
        assert set(body) == {"secretID", "name", "currentVersion", "metadata", "createdAt",
                             "updatedAt"}
        assert body["secretID"].startswith("sec_") and body["name"] == "openai-key"
        assert body["currentVersion"] == 1 and body["metadata"] == {"team": "ml"}
        assert body["createdAt"] == body["updatedAt"] and body["createdAt"].endswith("Z")
        sid = body["secretID"]

        for ref in (sid, "openai-key", "OPENAI-KEY"):
            got = await http.get(f"/secrets/{ref}", headers=ADMIN)
            assert got.status_code == 200 and got.json() == body

        dup = await http.post("/secrets", headers=ADMIN, json={"name": "openai-KEY", "value": "x"})
        assert dup.status_code == 409
        assert dup.json() == {"code": 409, "message": "secret 'openai-key' already exists"}

        updated = await http.post(f"/secrets/{sid}", headers=ADMIN, json={"value": "v2"})
        assert updated.status_code == 200
        assert (updated.json()["currentVersion"], updated.json()["metadata"]) == (2, {"team": "ml"})
        cleared = await http.post("/secrets/openai-key", headers=ADMIN,
                                  json={"value": "v3", "metadata": {}})
        assert cleared.json()["currentVersion"] == 3 and cleared.json()["metadata"] == {}

        gone = await http.delete("/secrets/openai-key", headers=ADMIN)
        assert gone.status_code == 204 and gone.content == b""
        for method, path in (("GET", "/secrets/openai-key"), ("DELETE", f"/secrets/{sid}"),
                             ("POST", f"/secrets/{sid}")):
            missing = await http.request(method, path, headers=ADMIN, json={"value": "x"})
            assert missing.status_code == 404, (method, path)
        assert missing.json()["message"] == f"secret '{sid}' not found"

        everything = [created, updated, cleared, dup, gone, missing]
    assert all(VALUE not in r.text for r in everything)
    assert VALUE not in caplog.text and "v2" not in [r.getMessage() for r in caplog.records]
    assert "secret created" in caplog.text


async def test_bad_input_is_a_400_that_never_quotes_the_value(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        cases = [
            ({"name": "", "value": VALUE}, "must not be empty"),
            ({"name": "a{b}", "value": VALUE}, "cannot contain"),
            ({"name": "sec_mine", "value": VALUE}, "reserved for secret ids"),
            ({"name": "a/b", "value": VALUE}, "URL path"),
            ({"name": "n" * 129, "value": VALUE}, "at most 128"),
            ({"name": "big", "value": VALUE * 3000}, "at most 65536 bytes"),
            ({"name": "num", "value": 12345}, "value must be of type string"),
            ({"name": "nov"}, "value is required"),
            ({"name": "m", "value": VALUE, "metadata": {str(i): "" for i in range(33)}},
             "at most 32 entries"),
            ({"name": "m", "value": VALUE, "metadata": {"k": 1}}, "strings to strings"),
            ({"name": "m", "value": VALUE, "metadata": {"k": "v" * 1025}}, "1024 bytes"),
        ]
        for body, message in cases:
            refused = await http.post("/secrets", headers=ADMIN, json=body)
            assert refused.status_code == 400, body
            assert message in refused.json()["message"], refused.text
            assert VALUE not in refused.text
        assert (await http.get("/secrets?limit=0", headers=ADMIN)).status_code == 400
        assert (await http.get("/secrets?nextToken=%25", headers=ADMIN)).status_code == 400
        assert (await http.get("/secrets", headers={"X-API-Key": "e2b_" + "f" * 40})
                ).status_code == 401


async def test_list_pages_newest_first_through_x_next_token(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        for i in range(5):
            made = await http.post("/secrets", headers=ADMIN, json={"name": f"s{i}", "value": "v"})
            assert made.status_code == 201
        seen: list[str] = []
        token: str | None = None
        pages = 0
        while True:
            params = {"limit": 2} | ({"nextToken": token} if token else {})
            page = await http.get("/secrets", headers=ADMIN, params=params)
            assert page.status_code == 200
            seen += [s["name"] for s in page.json()]
            pages += 1
            token = page.headers.get("x-next-token")
            if not token:
                break
        assert pages == 3 and seen == ["s4", "s3", "s2", "s1", "s0"]


async def test_a_key_sees_and_destroys_only_its_own_secrets(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        other_id, other = await _second_key(http)
        mine = (await http.post("/secrets", headers=ADMIN,
                                json={"name": "shared-name", "value": VALUE})).json()
        assert (await http.get("/secrets", headers=other)).json() == []
        for method in ("GET", "DELETE", "POST"):
            for ref in (mine["secretID"], "shared-name"):
                refused = await http.request(method, f"/secrets/{ref}", headers=other,
                                             json={"value": "stolen"})
                assert refused.status_code == 404, (method, ref)
        # The same name is free for the other key, and both stay apart.
        theirs = await http.post("/secrets", headers=other,
                                 json={"name": "shared-name", "value": "x"})
        assert theirs.status_code == 201 and theirs.json()["secretID"] != mine["secretID"]
        assert (await http.get("/secrets/shared-name", headers=ADMIN)).json() == mine
        assert await stack.gateway.secrets.unknown_secrets(other_id, {"shared-name", "nope"}) == [
            "nope"]
        assert await stack.gateway.secrets.unknown_secrets("admin", {"SHARED-NAME"}) == []


async def test_a_create_records_its_callers_key(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        other_id, other = await _second_key(http)
        made = await http.post("/v2/sandboxes", headers=other, json={"templateID": "base"})
        assert made.status_code == 201, made.text
        assert stack.nodeagent.specs[-1].owner_key_id == other_id
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.CreateSandbox(gateway_pb2.CreateSandboxRequest(template_id="base"),
                                 metadata=(("x-api-key", API_KEY),))
    assert stack.nodeagent.specs[-1].owner_key_id == "admin"
