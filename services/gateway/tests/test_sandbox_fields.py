"""SDK 2.63's sandbox request fields at the HTTP edge (over the fake node agent), each honoured as
E2B honours it or refused with a 400 naming it; the answers parse with the SDK's own models and
its error mapping (GuestUnresponsiveException, the retry of a capacity 429)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from e2b import AsyncSandbox
from e2b.api import handle_api_exception
from e2b.api.client.models.sandbox_detail import SandboxDetail
from e2b.api.client.types import Unset
from e2b.exceptions import GuestUnresponsiveException, RateLimitException

from aenv_common.errors import ResourceExhausted
from aenv_gateway.core.sandboxes import NODE_REFUSALS

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}


async def _create(http: httpx.AsyncClient, path: str = "/v2/sandboxes", **body: Any) -> str:
    created = await http.post(path, headers=AUTH, json={"templateID": "base", **body})
    assert created.status_code == 201, created.text
    sandbox_id: str = created.json()["sandboxID"]
    return sandbox_id


def _ttl(stack: Stack, sandbox_id: str) -> float:
    return float(stack.view.sandbox_records[sandbox_id].end_at.ToNanoseconds() / 1e9 - time.time())


@pytest.mark.parametrize(("body", "field"), [
    ({"iam": {"tokens": {"aws": {"audience": "sts.amazonaws.com", "tokenType": "jwt"}}}},
     "iam.tokens"),
    ({"mcp": {"github": {"token": "x"}}}, "mcp"),
    ({"timeout": 0}, "timeout"),
    ({"autoPause": True, "autoPauseMemory": False, "autoResume": {"enabled": True}},
     "autoPauseMemory"),
    ({"network": {"httpsPorts": [49983]}}, "network.httpsPorts"),
    ({"network": {"httpsPorts": [0]}}, "network.httpsPorts"),
    ({"network": {"httpsPorts": ["443"]}}, "network.httpsPorts"),
])
async def test_fields_it_cannot_honour_are_refused_by_name(
    stack: Stack, body: dict[str, Any], field: str
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        refused = await http.post("/v2/sandboxes", headers=AUTH,
                                  json={"templateID": "base", **body})
    assert refused.status_code == 400, refused.text
    assert field in refused.json()["message"]
    assert not stack.nodeagent.specs  # nothing was created without them


async def test_empty_iam_and_mcp_are_what_the_sdk_sends_by_default(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        await _create(http, iam={}, mcp=None)
        await _create(http, iam={"tokens": {}})
    assert len(stack.nodeagent.specs) == 2


async def test_timeouts_default_as_e2b_per_route(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        await _create(http)
        await _create(http, "/sandboxes")  # deprecated v1: E2B's SandboxTimeoutDefault
    assert [s.timeout_seconds for s in stack.nodeagent.specs] == [300, 15]


async def test_https_ports_and_explicit_internet_access_are_kept_and_reported(
    stack: Stack
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        https = await _create(http, network={"httpsPorts": [8443, 443, 8443]})
        closed = await _create(http, allow_internet_access=False)
        opened = await _create(http, allow_internet_access=True)
        details = {sid: (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
                   for sid in (https, closed, opened)}
    assert list(stack.nodeagent.specs[0].network.https_ports) == [443, 8443]
    network = SandboxDetail.from_dict(details[https]).network
    assert not isinstance(network, Unset) and network.https_ports == [443, 8443]
    # E2B: null when the create did not say, else what it said.
    assert [details[s]["allowInternetAccess"] for s in (https, closed, opened)] == [
        None, False, True]


async def test_connect_keeps_a_running_sandbox_300_s_from_now_never_less(
    stack: Stack
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        short = await _create(http, timeout=30)
        long = await _create(http, timeout=3600)
        for sid in (short, long):
            answer = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={})
            assert answer.status_code == 200, answer.text
        assert 290 < _ttl(stack, short) <= 300  # E2B's TestConnectV2_Timeout: 300 s from now
        assert _ttl(stack, long) > 3500  # a keep-alive never shortens it
        zero = await http.post(f"/v2/sandboxes/{short}/connect", headers=AUTH,
                               json={"timeout": 0})
        assert zero.status_code == 400


async def test_connect_resumes_a_paused_sandbox_for_its_timeout(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http, timeout=30)
        paused = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        assert paused.status_code == 204
        resumed = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={})
        assert resumed.status_code == 201
        assert 290 < _ttl(stack, sid) <= 300
        await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        legacy = await http.post(f"/sandboxes/{sid}/resume", headers=AUTH, json={})
        assert legacy.status_code == 201
        assert 5 < _ttl(stack, sid) <= 15  # ResumedSandbox's default


async def test_legacy_resume_may_only_restate_auto_pause(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        changed = await http.post(f"/sandboxes/{sid}/resume", headers=AUTH,
                                  json={"autoPause": True})
        assert changed.status_code == 400 and "autoPause" in changed.json()["message"]
        same = await http.post(f"/sandboxes/{sid}/resume", headers=AUTH,
                               json={"autoPause": False, "timeout": 60})
        assert same.status_code == 201


async def test_a_wedged_guest_is_refused_when_asked_else_paused_marked(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = await _create(http)
        stack.nodeagent.wedged.add(sid)
        strict = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH,
                                 json={"requireHealthyGuest": True})
        assert strict.status_code == 503  # ServiceBusyException; it keeps running
        assert stack.nodeagent.pauses[-1].require_healthy_guest
        info = (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
        assert info["state"] == "running" and "envdUnresponsiveAtPause" not in info
        paused = await http.post(f"/sandboxes/{sid}/pause", headers=AUTH, json={})
        assert paused.status_code == 204
        info = (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
        assert info["envdUnresponsiveAtPause"] is True
        listed = (await http.get("/v2/sandboxes", headers=AUTH)).json()
        assert [s.get("envdUnresponsiveAtPause") for s in listed] == [True]
        plain = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={})
        assert plain.status_code == 409
        assert isinstance(handle_api_exception(plain), GuestUnresponsiveException)
        assert stack.nodeagent.resumes == 0
        rebooted = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH,
                                   json={"memory": False})
        assert rebooted.status_code == 201 and stack.nodeagent.reboots == [True]


async def test_the_sdk_retries_a_full_cluster_and_says_what_harbor_waits_for(
    e2b_env: Stack
) -> None:
    """A create no node has room for now is E2B's 429 for a full team: the SDK's own retry
    sends it again after Retry-After (Should-Retry: true), and what it finally raises carries
    the words Harbor's E2B environment waits for room on ("maximum number of concurrent")."""
    full = ResourceExhausted("node 'n1' cannot take the sandbox: 40 of 40 vCPUs are taken")
    e2b_env.nodeagent.create_failures[:] = [full] * (NODE_REFUSALS + 1)
    sbx = await AsyncSandbox.create("base", timeout=60)  # retried once, 1 s later
    assert sbx.sandbox_id and not e2b_env.nodeagent.create_failures
    assert len(e2b_env.nodeagent.specs) == NODE_REFUSALS + 2
    e2b_env.nodeagent.create_failures[:] = [full] * (NODE_REFUSALS + 1)
    with pytest.raises(RateLimitException) as refused:
        await AsyncSandbox.create("base", timeout=60, retries=0)
    assert "maximum number of concurrent" in str(refused.value)


@pytest.mark.parametrize("state", ["running", "paused", "unknown"])
async def test_a_resume_with_a_negative_timeout_and_unknown_fields_is_a_400(
    stack: Stack, state: str,
) -> None:
    """Schemathesis' case: the timeout is refused before the sandbox is looked up, whatever it
    is, naming the field and its bounds; unknown fields are ignored, as E2B's API does."""
    async with httpx.AsyncClient(base_url=stack.url) as http:
        sandbox_id = "i0000000000000000000" if state == "unknown" else await _create(http)
        if state == "paused":
            paused = await http.post(f"/sandboxes/{sandbox_id}/pause", headers=AUTH, json={})
            assert paused.status_code == 204, paused.text
        answer = await http.post(
            f"/sandboxes/{sandbox_id}/resume", headers=AUTH,
            json={"memory": False, "timeout": -8881, "x-unknown": {"a": [1, None]}, "": 0.5})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {
        "code": 400, "message": "timeout must be between 1 and 86400 seconds"}
    assert stack.nodeagent.resumes == 0
