"""The gateway's `/metrics`: Prometheus' text format, unauthenticated, its counters moving with
the requests it serves; a request naming a sandbox still reaches that sandbox's /metrics."""

from __future__ import annotations

import httpx

from aenv_testing.metrics import Samples, moved, parse

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


async def scrape(http: httpx.AsyncClient) -> Samples:
    reply = await http.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    return parse(reply.text)


async def test_metrics_count_requests_and_sandboxes(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        before = await scrape(http)
        for _ in range(2):
            created = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
            assert created.status_code == 201
        refused = await http.get("/sandboxes/nosuchsandbox", headers=AUTH)
        assert refused.status_code == 404
        after = await scrape(http)

    assert moved(before, after, "aenv_http_requests_total", method="POST", status="201") == 2
    assert moved(before, after, "aenv_http_requests_total", method="GET", status="404") == 1
    assert moved(before, after, "aenv_http_request_seconds_count", method="POST") == 2
    # Watched records: the two just created, running.
    assert after[("aenv_sandboxes", (("state", "running"),))] >= 2
    # The fake node agent's gRPC server shares the process (and its registry).
    assert moved(before, after, "aenv_grpc_requests_total",
                 method="/aenv.nodeagent.v1.NodeAgentService/CreateSandbox", code="OK") == 2


async def test_metrics_of_a_named_sandbox_are_its_own(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
        sid = created.json()["sandboxID"]
        reply = await http.get("/metrics", headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(stack.guest_port),
            "X-Access-Token": "tok"})
    assert "aenv_http_requests_total" not in reply.text  # the guest's answer, not the gateway's
