"""Control plane over plain HTTP: exact bodies and statuses."""

from __future__ import annotations

import asyncio
import time

import httpx

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


async def _client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, timeout=10)


async def test_create_get_list_timeout_kill(stack: Stack) -> None:
    async with await _client(stack) as http:
        created = await http.post(
            "/v2/sandboxes",
            headers=AUTH,
            json={
                "templateID": "base",
                "metadata": {"k": "v"},
                "envVars": {"A": "1"},
                "allow_internet_access": False,
                "autoPause": True,
                "autoResume": {"enabled": True},
            },
        )
        assert created.status_code == 201
        body = created.json()
        sid = body["sandboxID"]
        assert body["templateID"] == "base" and body["envdVersion"] == "0.5.7"
        assert body["envdAccessToken"] and body["domain"] == "aenv.test"
        spec = stack.nodeagent.specs[-1]
        assert spec.timeout_seconds == 300 and dict(spec.env_vars) == {"A": "1"}
        assert not spec.network.allow_internet_access and list(spec.network.deny_out) == [
            "0.0.0.0/0"
        ]
        assert spec.lifecycle.auto_pause and spec.lifecycle.auto_resume

        detail = (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
        assert detail["state"] == "running" and detail["metadata"] == {"k": "v"}
        assert (
            detail["cpuCount"] == 2 and detail["memoryMB"] == 512 and detail["diskSizeMB"] == 1024
        )
        assert detail["lifecycle"] == {"autoResume": True, "onTimeout": "pause"}
        assert detail["startedAt"].endswith("Z") and detail["allowInternetAccess"] is False

        listed = await http.get("/v2/sandboxes", headers=AUTH)
        assert [s["sandboxID"] for s in listed.json()] == [sid]
        assert "x-next-token" not in listed.headers
        legacy = await http.get("/sandboxes", headers=AUTH)
        assert [s["sandboxID"] for s in legacy.json()] == [sid]

        timeout = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH, json={"timeout": 1000})
        assert timeout.status_code == 204
        end = stack.view.sandbox_records[sid].end_at.seconds
        assert end > stack.view.sandbox_records[sid].started_at.seconds + 900

        assert (await http.delete(f"/sandboxes/{sid}", headers=AUTH)).status_code == 204
        gone = await http.delete(f"/sandboxes/{sid}", headers=AUTH)
        assert gone.status_code == 404 and gone.json()["code"] == 404


async def test_error_bodies(stack: Stack) -> None:
    async with await _client(stack) as http:
        cases = [
            (http.post("/v2/sandboxes", headers=AUTH, content=b"{not json"), 400),
            (http.post("/v2/sandboxes", headers=AUTH, json=[1]), 400),
            (http.post("/v2/sandboxes", headers=AUTH, json={"templateID": 5}), 400),
            (
                http.post(
                    "/v2/sandboxes", headers=AUTH, json={"templateID": "base", "timeout": "x"}
                ),
                400,
            ),
            (
                http.post(
                    "/v2/sandboxes", headers=AUTH, json={"templateID": "base", "timeout": True}
                ),
                400,
            ),
            (
                http.post(
                    "/v2/sandboxes", headers=AUTH, json={"templateID": "base", "envVars": {"a": 1}}
                ),
                400,
            ),
            (http.post("/v2/sandboxes", headers=AUTH, json={}), 400),
            (http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "nope"}), 404),
            (http.post("/v2/sandboxes", json={"templateID": "base"}), 401),
            (http.post("/v2/sandboxes", headers={"X-API-Key": "e2b_wrong"}, json={}), 401),
            (http.get("/sandboxes/missing", headers=AUTH), 404),
            (http.post("/sandboxes/missing/timeout", headers=AUTH, json={}), 400),
            (http.post("/sandboxes/missing/timeout", headers=AUTH, json={"timeout": 5}), 404),
            (http.post("/sandboxes/missing/refreshes", headers=AUTH, json={}), 404),
            (http.get("/v2/sandboxes/missing/logs", headers=AUTH), 404),
            (http.get("/v2/sandboxes?limit=0", headers=AUTH), 400),
            (http.get("/v2/sandboxes?state=weird", headers=AUTH), 400),
            (http.get("/v2/sandboxes?nextToken=%%%", headers=AUTH), 400),
            (http.get("/nowhere"), 404),
            (http.put("/v2/sandboxes", headers=AUTH), 405),
            (http.post("/sandboxes/x/pause", headers=AUTH, json={}), 404),
        ]
        for request, status in cases:
            response = await request
            assert response.status_code == status, (status, response.text)
            body = response.json()
            assert body["code"] == status and isinstance(body["message"], str)
        assert (await http.get("/health")).json() == {"status": "ok"}


async def test_idempotency_key_returns_same_sandbox(stack: Stack) -> None:
    async with await _client(stack) as http:
        headers = {**AUTH, "Idempotency-Key": "abc-123"}
        first = await http.post("/v2/sandboxes", headers=headers, json={"templateID": "base"})
        second = await http.post("/v2/sandboxes", headers=headers, json={"templateID": "base"})
        assert first.status_code == second.status_code == 201
        assert first.json()["sandboxID"] == second.json()["sandboxID"]
        assert len(stack.nodeagent.specs) == 1
        bad = await http.post(
            "/v2/sandboxes",
            headers={**AUTH, "Idempotency-Key": "UPPER"},
            json={"templateID": "base"},
        )
        assert bad.status_code == 400


async def test_list_filters_and_pages(stack: Stack) -> None:
    async with await _client(stack) as http:
        ids = []
        for i in range(5):
            r = await http.post(
                "/v2/sandboxes",
                headers=AUTH,
                json={"templateID": "base", "metadata": {"user": "a b", "i": str(i % 2)}},
            )
            ids.append(r.json()["sandboxID"])
        # metadata filter double-encoded as the SDK sends it: {"user": "a b", "i": "1"}
        query = "metadata=user%3Da%2520b%26i%3D1"
        page1 = await http.get(f"/v2/sandboxes?{query}&limit=1", headers=AUTH)
        token = page1.headers["x-next-token"]
        page2 = await http.get(f"/v2/sandboxes?{query}&limit=1&nextToken={token}", headers=AUTH)
        assert "x-next-token" not in page2.headers
        got = [s["sandboxID"] for s in page1.json() + page2.json()]
        assert got == [ids[3], ids[1]]  # newest first
        asc = await http.get("/v2/sandboxes?order=asc&state=running", headers=AUTH)
        assert [s["sandboxID"] for s in asc.json()] == ids
        paused = await http.get("/v2/sandboxes?state=paused", headers=AUTH)
        assert paused.json() == []


async def test_delete_template_routes_on_raw_path(stack: Stack) -> None:
    async with await _client(stack) as http:
        r = await http.delete("/templates/team%2Fsnap%3Av1", headers=AUTH)
        assert r.status_code == 404 and "team/snap:v1" in r.json()["message"]


async def test_connect_running_extends_only(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = (
            await http.post(
                "/v2/sandboxes", headers=AUTH, json={"templateID": "base", "timeout": 600}
            )
        ).json()["sandboxID"]
        end = stack.view.sandbox_records[sid].end_at.seconds
        shorter = await http.post(
            f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={"timeout": 10}
        )
        assert shorter.status_code == 200 and shorter.json()["sandboxID"] == sid
        assert stack.view.sandbox_records[sid].end_at.seconds == end
        longer = await http.post(f"/sandboxes/{sid}/connect", headers=AUTH, json={"timeout": 3000})
        assert longer.status_code == 200
        assert stack.view.sandbox_records[sid].end_at.seconds > end + 2000
        v1_missing_timeout = await http.post(f"/sandboxes/{sid}/connect", headers=AUTH, json={})
        assert v1_missing_timeout.status_code == 400
        not_paused = await http.post(f"/sandboxes/{sid}/resume", headers=AUTH, json={})
        assert not_paused.status_code == 409
        paused = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        assert paused.status_code == 204
        assert stack.view.sandbox_records[sid].state == 3  # paused
        again = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        assert again.status_code == 409  # the SDK's pause() returns False
        resumed = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={})
        assert resumed.status_code == 201 and resumed.json()["sandboxID"] == sid
        assert stack.view.sandbox_records[sid].state == 2  # running


async def test_concurrent_connects_share_one_resume(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = (await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
               ).json()["sandboxID"]
        assert (await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
                ).status_code == 204
        answers = await asyncio.gather(*(
            http.post(f"/sandboxes/{sid}/connect", headers=AUTH, json={"timeout": timeout})
            for timeout in (60, 60, 3000)))
        assert [a.status_code for a in answers] == [201, 201, 201], [a.text for a in answers]
        assert stack.nodeagent.resumes == 1
        record = stack.view.sandbox_records[sid]
        assert record.state == 2 and record.end_at.seconds > time.time() + 2000  # the longest


async def test_snapshot_and_fork(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = (await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
               ).json()["sandboxID"]
        snap = await http.post(f"/sandboxes/{sid}/snapshots", headers=AUTH, json={"name": "n1"})
        assert snap.status_code == 201
        assert snap.json() == {"snapshotID": "aenv/n1:default", "names": ["aenv/n1"]}
        forked = await http.post(f"/sandboxes/{sid}/fork", headers=AUTH, json={"count": 3})
        assert forked.status_code == 201
        body = forked.json()
        assert [sorted(entry) for entry in body] == [["sandbox"], ["error"], ["sandbox"]]
        assert body[1]["error"] == {"code": 503, "message": "no room"}
        child_ids = {body[0]["sandbox"]["sandboxID"], body[2]["sandbox"]["sandboxID"]}
        assert len(child_ids | {sid}) == 3
        too_many = await http.post(f"/sandboxes/{sid}/fork", headers=AUTH, json={"count": 101})
        assert too_many.status_code == 400


async def test_openapi_lists_every_route(stack: Stack) -> None:
    from starlette.routing import Route

    async with await _client(stack) as http:
        doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    routes = [r for r in stack.gateway.routes if isinstance(r, Route)]
    assert routes
    for route in routes:
        path = (route.path.replace("{sandbox_id}", "{sandboxID}")
                .replace("{template_id:anypath}", "{templateID}")
                .replace("{template_id:template_id}", "{templateID}")
                .replace("{template_id}", "{templateID}").replace("{build_id}", "{buildID}")
                .replace("{key_id}", "{keyID}"))
        for method in route.methods or ():
            if method == "HEAD":
                continue
            assert method.lower() in doc["paths"][path], (method, path)
