"""SandboxNetworkConfig options at create and update: kept, reported, and never silently dropped."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


async def _create(http: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base", **body})


async def test_private_traffic_gets_a_token_and_the_options_are_reported(stack: Stack) -> None:
    network = {"allowPublicTraffic": False, "maskRequestHost": "${PORT}-app.example.com",
               "dnsServers": ["1.1.1.1"], "egressProxy": None, "rules": None}
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await _create(http, network=network)
        assert created.status_code == 201, created.text
        body = created.json()
        token = body["trafficAccessToken"]
        assert isinstance(token, str) and len(token) >= 32
        spec = stack.nodeagent.specs[-1]
        assert spec.traffic_access_token == token and spec.network.private_traffic
        detail = (await http.get(f"/sandboxes/{body['sandboxID']}", headers=AUTH)).json()
        assert detail["network"] == {
            "allowPublicTraffic": False, "allowOut": [], "denyOut": [],
            "dnsServers": ["1.1.1.1"], "maskRequestHost": "${PORT}-app.example.com"}


async def test_public_sandboxes_have_no_traffic_token(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await _create(http, network={"allowPublicTraffic": True})
        assert created.json()["trafficAccessToken"] is None
        assert not stack.nodeagent.specs[-1].traffic_access_token


async def test_options_that_cannot_be_honoured_are_refused(stack: Stack) -> None:
    refused: list[tuple[dict[str, Any], str]] = [
        ({"volumeMounts": [{"name": "data", "path": "/data"}]}, "volumeMounts"),
        ({"iam": {"tokens": {"aws": {"audience": "sts", "tokenType": "JWT-SVID"}}}},
         "iam.tokens"),
    ]
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        for body, name in refused:
            response = await _create(http, **body)
            assert response.status_code == 400, body
            assert name in response.json()["message"]
        assert (await _create(http, volumeMounts=[])).status_code == 201
