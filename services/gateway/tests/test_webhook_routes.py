"""E2B's webhook routes on the gateway's HTTP edge (in memory, no delivery): exact statuses and
bodies, E2B's JSON in and out, one key's webhooks invisible to another, the secret never
answered or logged."""

from __future__ import annotations

import logging

import httpx
import pytest

from .conftest import API_KEY, Stack

ADMIN = {"X-API-Key": API_KEY}
SECRET = "whsec-test-never-shown"
CREATE: dict[str, object] = {
    "name": "My Sandbox Webhook", "url": "https://hooks.example/e2b?t=1", "enabled": True,
    "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"],
          "signatureSecret": SECRET}


async def test_a_webhook_through_its_routes_as_e2bs_docs_show(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await http.post("/events/webhooks", headers=ADMIN, json=CREATE)
        assert created.status_code == 201, created.text
        body = created.json()
        assert set(body) == {"id", "teamId", "teamID", "name", "createdAt", "url", "enabled",
                             "events"}
        assert (body["name"], body["url"], body["enabled"]) == (
            CREATE["name"], CREATE["url"], True)
        assert body["events"] == ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"]
        assert body["teamId"] == body["teamID"] == "admin" and body["createdAt"].endswith("Z")
        hook = f"/events/webhooks/{body['id']}"

        assert (await http.get(hook, headers=ADMIN)).json() == body
        assert (await http.get("/events/webhooks", headers=ADMIN)).json() == [body]

        patched = await http.patch(hook, headers=ADMIN, json={
            "enabled": False, "events": ["sandbox.lifecycle.paused"], "signatureSecret": "new"})
        assert patched.status_code == 200, patched.text
        assert patched.json() | {"enabled": True, "events": body["events"]} == body
        assert not patched.json()["enabled"]
        assert patched.json()["events"] == ["sandbox.lifecycle.paused"]

        logged = await http.get(hook + "/deliveries", headers=ADMIN)
        assert logged.status_code == 200 and logged.json() == []

        gone = await http.delete(hook, headers=ADMIN)
        assert gone.status_code == 200 and gone.content == b""
        for method in ("GET", "PATCH", "DELETE"):
            missing = await http.request(method, hook, headers=ADMIN, json={})
            assert missing.status_code == 404
            assert missing.json() == {"code": 404, "message": f"webhook '{body['id']}' not found"}
    assert SECRET not in caplog.text and '"new"' not in caplog.text


@pytest.mark.parametrize(("change", "status", "words"), [
    ({"url": "ftp://hooks.example/"}, 400, "http or https"),
    ({"url": "http://127.0.0.1:9/hook"}, 400, "loopback"),
    ({"url": "http://10.1.1.1/hook"}, 400, "private"),
    ({"url": "http://169.254.169.254/latest/meta-data"}, 400, "metadata"),
    ({"events": ["sandbox.lifecycle.exploded"]}, 400, "unknown event types"),
    ({"events": "sandbox.lifecycle.created"}, 400, "events must be of type array"),
    ({"signatureSecret": None}, 400, "signatureSecret is required"),
    ({"name": 7}, 400, "name must be of type string"),
    ({"enabled": "yes"}, 400, "enabled must be of type boolean"),
])
async def test_a_registration_e2b_would_refuse_is_a_400(
    stack: Stack, change: dict[str, object], status: int, words: str
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        refused = await http.post("/events/webhooks", headers=ADMIN, json=CREATE | change)
        assert refused.status_code == status, refused.text
        assert words in refused.json()["message"]
        assert SECRET not in refused.text
        assert (await http.get("/events/webhooks", headers=ADMIN)).json() == []


async def test_a_key_sees_only_its_own_webhooks(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = (await http.post("/admin/keys", headers=ADMIN, json={"name": "other"})).json()
        other = {"X-API-Key": created["key"]}
        mine = (await http.post("/events/webhooks", headers=other, json=CREATE)).json()
        assert mine["teamId"] == created["keyID"]
        assert (await http.get("/events/webhooks", headers=ADMIN)).json() == []
        for method, path in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("GET", "/deliveries")):
            answer = await http.request(method, f"/events/webhooks/{mine['id']}{path}",
                                        headers=ADMIN, json={})
            assert answer.status_code == 404
        assert (await http.get("/events/webhooks", headers=other)).json() == [mine]
        assert (await http.get("/events/webhooks")).status_code == 401


async def test_a_delivery_log_limit_out_of_range_is_a_400(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        made = (await http.post("/events/webhooks", headers=ADMIN, json=CREATE)).json()
        for limit in ("0", "1001", "x"):
            answer = await http.get(f"/events/webhooks/{made['id']}/deliveries",
                                    headers=ADMIN, params={"limit": limit})
            assert answer.status_code == 400
