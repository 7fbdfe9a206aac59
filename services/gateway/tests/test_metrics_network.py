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


async def test_metrics_are_the_node_agents_sample(stack: Stack) -> None:
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
