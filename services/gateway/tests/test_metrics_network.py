"""`GET /sandboxes/{id}/metrics` and `PUT /sandboxes/{id}/network` reach the owning node agent."""

from __future__ import annotations

import httpx

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


async def _create(http: httpx.AsyncClient) -> str:
    created = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
    assert created.status_code == 201
    sandbox_id: str = created.json()["sandboxID"]
    return sandbox_id


async def test_metrics_are_the_node_agents_samples(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        response = await http.get(f"/sandboxes/{sid}/metrics?start=1&end=2", headers=AUTH)
        assert response.status_code == 200
        [metric] = response.json()
        assert metric["cpuCount"] == 2 and metric["cpuUsedPct"] == 12.5
        assert metric["memTotal"] == 512 << 20 and metric["diskTotal"] == 1 << 30
        assert metric["timestamp"].endswith("Z") and metric["timestampUnix"] > 0
        missing = await http.get("/sandboxes/missing/metrics", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["code"] == 404


async def test_metrics_window_reaches_the_node_agent(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        for query in ("?start=10&end=20", "?start=0", "?end=5", ""):
            response = await http.get(f"/sandboxes/{sid}/metrics{query}", headers=AUTH)
            assert response.status_code == 200, query
    windows = [
        (r.start if r.HasField("start") else None, r.end if r.HasField("end") else None)
        for r in stack.nodeagent.metric_requests
    ]
    # Absent bounds stay unset (not 0): the node agent tells them apart by presence.
    assert windows == [(10, 20), (0, None), (None, 5), (None, None)]


async def test_metrics_window_is_validated(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        for query in ("start=abc", "end=1.5", "start=-1", "start=20&end=10", "end=1e3",
                      "start=&end=", f"end={2**63}"):
            response = await http.get(f"/sandboxes/{sid}/metrics?{query}", headers=AUTH)
            assert response.status_code == 400, query
            body = response.json()
            assert body["code"] == 400 and body["message"], query
        same = await http.get(f"/sandboxes/{sid}/metrics?start=10&end=10", headers=AUTH)
        assert same.status_code == 200
    assert len(stack.nodeagent.metric_requests) == 1


async def test_batch_metrics_by_sandbox_id(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        a, b = await _create(http), await _create(http)
        response = await http.get(
            "/sandboxes/metrics", params={"sandbox_ids": f"{a},missing,{b},{a}"}, headers=AUTH
        )
        assert response.status_code == 200
        sandboxes = response.json()["sandboxes"]
        # Unknown ids are left out; the others map to their newest sample.
        assert list(sandboxes) == [a, b]
        assert sandboxes[a]["cpuCount"] == 2 and sandboxes[b]["memTotal"] == 512 << 20
        # One call per owning node, each id once.
        assert stack.nodeagent.latest_requests == [[a, b]]
        none = await http.get("/sandboxes/metrics?sandbox_ids=missing", headers=AUTH)
        assert none.status_code == 200 and none.json() == {"sandboxes": {}}
        assert len(stack.nodeagent.latest_requests) == 1  # no node asked about unknown ids


async def test_batch_metrics_validation(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        for query in ("", "?sandbox_ids=", "?sandbox_ids=,,",
                      "?sandbox_ids=" + ",".join(f"s{i}" for i in range(101))):
            response = await http.get(f"/sandboxes/metrics{query}", headers=AUTH)
            assert response.status_code == 400, query
            assert response.json()["code"] == 400
        unauthenticated = await http.get("/sandboxes/metrics?sandbox_ids=a")
        assert unauthenticated.status_code == 401


async def test_network_update_replaces_policy(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        body = {"allowOut": ["1.1.1.1"], "denyOut": ["8.8.8.0/24"], "allow_internet_access": False}
        response = await http.put(f"/sandboxes/{sid}/network", headers=AUTH, json=body)
        assert response.status_code == 204
        network = stack.view.sandbox_records[sid].network
        assert not network.allow_internet_access
        assert list(network.allow_out) == ["1.1.1.1"]
        assert list(network.deny_out) == ["8.8.8.0/24", "0.0.0.0/0"]
        # Omitted fields are cleared.
        cleared = await http.put(f"/sandboxes/{sid}/network", headers=AUTH, json={})
        assert cleared.status_code == 204
        network = stack.view.sandbox_records[sid].network
        assert network.allow_internet_access and not network.allow_out and not network.deny_out
        bad = await http.put(f"/sandboxes/{sid}/network", headers=AUTH, json={"allowOut": "x"})
        assert bad.status_code == 400
        missing = await http.put("/sandboxes/missing/network", headers=AUTH, json={})
        assert missing.status_code == 404
