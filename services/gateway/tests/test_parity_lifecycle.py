"""E2B parity of the sandbox's lifetime and logs at the HTTP edge (over the fake node agent):
`timeout: 0` runs the timeout action now, `refreshes` only ever extends, and both log routes
page as E2B's API pages them; the bodies parse with the official SDK's own models."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from e2b.api.client.models.sandbox_logs import SandboxLogs as SdkSandboxLogs
from e2b.api.client.models.sandbox_logs_v2_response import SandboxLogsV2Response
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.limits import MAX_TIMEOUT_S
from aenv_gateway.rest.errors import NotImplementedYet, typed_error_response

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}
RUNNING, PAUSED = cluster_pb2.SANDBOX_STATE_RUNNING, cluster_pb2.SANDBOX_STATE_PAUSED


async def _client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, timeout=10)


async def _create(http: httpx.AsyncClient, **body: Any) -> str:
    created = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base", **body})
    assert created.status_code == 201, created.text
    sandbox_id: str = created.json()["sandboxID"]
    return sandbox_id


def _end(stack: Stack, sandbox_id: str) -> float:
    return float(stack.view.sandbox_records[sandbox_id].end_at.ToNanoseconds() / 1e9)


# --- set_timeout(0) ------------------------------------------------------------------------------

async def test_a_timeout_of_zero_kills_now(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _create(http)
        answer = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH, json={"timeout": 0})
        assert answer.status_code == 204 and answer.content == b""
        assert (await http.get(f"/sandboxes/{sid}", headers=AUTH)).status_code == 404
        listed = (await http.get("/v2/sandboxes", headers=AUTH)).json()
        assert sid not in {s["sandboxID"] for s in listed}
        again = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH, json={"timeout": 0})
        assert again.status_code == 404


@pytest.mark.parametrize(("memory", "mode"), [(None, "full"), (True, "full"),
                                              (False, "filesystem")])
async def test_a_timeout_of_zero_pauses_who_asked_for_it(
    stack: Stack, memory: bool | None, mode: str
) -> None:
    lifecycle: dict[str, Any] = {"autoPause": True}
    if memory is not None:
        lifecycle["autoPauseMemory"] = memory
    async with await _client(stack) as http:
        sid = await _create(http, **lifecycle)
        answer = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH, json={"timeout": 0})
        assert answer.status_code == 204
        info = (await http.get(f"/sandboxes/{sid}", headers=AUTH)).json()
        assert info["state"] == "paused" and info["pauseMode"] == mode
        assert info["lifecycle"] == {"autoResume": False, "onTimeout": "pause"}
        resumed = await http.post(f"/v2/sandboxes/{sid}/connect", headers=AUTH, json={})
        assert resumed.status_code == 201


async def test_timeouts_out_of_range_are_taken_as_e2b_takes_them(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _create(http)
        for timeout in ("5", None, 1.5):
            answer = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH,
                                     json={"timeout": timeout})
            assert answer.status_code == 400, (timeout, answer.text)
        assert stack.view.sandbox_records[sid].state == RUNNING
        # Longer than a sandbox may live: cut to the longest lifetime since its start.
        started = stack.view.sandbox_records[sid].started_at.ToNanoseconds() / 1e9
        answer = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH,
                                 json={"timeout": MAX_TIMEOUT_S * 2})
        assert answer.status_code == 204
        assert started + MAX_TIMEOUT_S - 2 <= _end(stack, sid) <= started + MAX_TIMEOUT_S
        # Negative is "now", as 0 is.
        answer = await http.post(f"/sandboxes/{sid}/timeout", headers=AUTH, json={"timeout": -5})
        assert answer.status_code == 204
        assert (await http.get(f"/sandboxes/{sid}", headers=AUTH)).status_code == 404


# --- refreshes ----------------------------------------------------------------------------------

async def test_a_refresh_extends_to_at_least_fifteen_seconds(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _create(http, timeout=1)
        before = time.time()
        for body in ({}, {"duration": 0}, {"duration": 5}, {"duration": None}):
            answer = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH, json=body)
            assert answer.status_code == 204 and answer.content == b""
            assert before + 14 <= _end(stack, sid) <= time.time() + 16
        no_body = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH)
        assert no_body.status_code == 204


async def test_a_refresh_never_shortens(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _create(http, timeout=600)
        end = _end(stack, sid)
        shorter = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH,
                                  json={"duration": 60})
        assert shorter.status_code == 204 and _end(stack, sid) == end
        longer = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH,
                                 json={"duration": 3600})
        assert longer.status_code == 204 and _end(stack, sid) > end + 2900
        assert stack.nodeagent.view.sandbox_records[sid].state == RUNNING


async def test_refresh_errors(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _create(http)
        for body in ({"duration": 3601}, {"duration": -1}, {"duration": "60"},
                     {"duration": True}):
            answer = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH, json=body)
            assert answer.status_code == 400, body
            assert answer.json()["code"] == 400
        missing = await http.post("/sandboxes/nosuch/refreshes", headers=AUTH, json={})
        assert missing.status_code == 404
        unauthenticated = await http.post(f"/sandboxes/{sid}/refreshes", json={})
        assert unauthenticated.status_code == 401
        assert (await http.post(f"/sandboxes/{sid}/pause", headers=AUTH)).status_code == 204
        paused = await http.post(f"/sandboxes/{sid}/refreshes", headers=AUTH, json={})
        assert paused.status_code == 404  # E2B refreshes running sandboxes only


def test_not_implemented_yet_still_tells_the_sdk_not_to_retry() -> None:
    assert typed_error_response(NotImplementedYet("x")).headers["should-retry"] == "false"


# --- logs ---------------------------------------------------------------------------------------

T0_MS = time.time_ns() // 1_000_000 - 60_000  # within the default window (the last week)


def _entry(offset_ms: int, message: str,
           level: nodeagent_pb2.LogLevel = nodeagent_pb2.LOG_LEVEL_INFO
           ) -> nodeagent_pb2.SandboxLogEntry:
    stamp = Timestamp()
    stamp.FromMilliseconds(T0_MS + offset_ms)
    return nodeagent_pb2.SandboxLogEntry(
        timestamp=stamp, level=level, message=message, fields={"logger": "aenv_envd.app"},
        line=f"raw {message}")


def _messages(body: dict[str, Any]) -> list[str]:
    return [entry["message"] for entry in body["logs"]]


async def _logged(stack: Stack, http: httpx.AsyncClient) -> str:
    sid = await _create(http)
    stack.nodeagent.logs[sid] = [
        _entry(0, "first"), _entry(1000, "slow", nodeagent_pb2.LOG_LEVEL_WARN),
        _entry(2000, "boom", nodeagent_pb2.LOG_LEVEL_ERROR),
        _entry(3000, "noise", nodeagent_pb2.LOG_LEVEL_DEBUG), _entry(4000, "last"),
    ]
    return sid


async def test_v2_logs_are_newest_first_by_default_and_page_by_cursor(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _logged(stack, http)
        newest = await http.get(f"/v2/sandboxes/{sid}/logs", headers=AUTH)
        assert newest.status_code == 200
        assert _messages(newest.json()) == ["last", "noise", "boom", "slow", "first"]
        parsed = SandboxLogsV2Response.from_dict(newest.json())
        assert parsed.logs[0].message == "last" and parsed.logs[0].level.value == "info"
        assert parsed.logs[0].fields.additional_properties == {"logger": "aenv_envd.app"}
        assert parsed.logs[0].timestamp.timestamp() * 1000 == T0_MS + 4000
        page = await http.get(f"/v2/sandboxes/{sid}/logs?limit=2", headers=AUTH)
        assert _messages(page.json()) == ["last", "noise"]
        # Backward from a cursor: the entries before it (it excluded), newest first.
        before = await http.get(f"/v2/sandboxes/{sid}/logs?cursor={T0_MS + 3000}&limit=2",
                                headers=AUTH)
        assert _messages(before.json()) == ["boom", "slow"]
        # Forward from a cursor: the entries from it on, oldest first.
        after = await http.get(
            f"/v2/sandboxes/{sid}/logs?cursor={T0_MS + 1000}&direction=forward&limit=2",
            headers=AUTH)
        assert _messages(after.json()) == ["slow", "boom"]
        empty = await http.get(f"/v2/sandboxes/{sid}/logs?limit=0", headers=AUTH)
        assert empty.json() == {"logs": []}


async def test_v2_logs_filter_by_least_level_and_substring(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _logged(stack, http)
        warn = await http.get(f"/v2/sandboxes/{sid}/logs?level=warn&direction=forward",
                              headers=AUTH)
        assert _messages(warn.json()) == ["slow", "boom"]
        assert [e["level"] for e in warn.json()["logs"]] == ["warn", "error"]
        debug = await http.get(f"/v2/sandboxes/{sid}/logs?level=debug", headers=AUTH)
        assert len(debug.json()["logs"]) == 5
        search = await http.get(f"/v2/sandboxes/{sid}/logs?search=o", headers=AUTH)
        assert _messages(search.json()) == ["noise", "boom", "slow"]
        assert (await http.get(f"/v2/sandboxes/{sid}/logs?search=O", headers=AUTH)
                ).json() == {"logs": []}  # case-sensitive


async def test_v2_log_query_errors(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _logged(stack, http)
        for query in ("limit=1001", "limit=-1", "limit=x", "cursor=-5", "cursor=soon",
                      "direction=sideways", "level=trace", "search=" + "a" * 257):
            answer = await http.get(f"/v2/sandboxes/{sid}/logs?{query}", headers=AUTH)
            assert answer.status_code == 400, query
            assert answer.json()["code"] == 400
        assert (await http.get(f"/v2/sandboxes/{sid}/logs")).status_code == 401
        assert (await http.get("/v2/sandboxes/nosuch/logs", headers=AUTH)).status_code == 404


async def test_v1_logs_are_oldest_first_as_lines_and_entries(stack: Stack) -> None:
    async with await _client(stack) as http:
        sid = await _logged(stack, http)
        answer = await http.get(f"/sandboxes/{sid}/logs?start={T0_MS + 1000}&limit=2",
                                headers=AUTH)
        assert answer.status_code == 200
        body = answer.json()
        assert [line["line"] for line in body["logs"]] == ["raw slow", "raw boom"]
        assert [e["message"] for e in body["logEntries"]] == ["slow", "boom"]
        parsed = SdkSandboxLogs.from_dict(body)
        assert parsed.logs[0].line == "raw slow"
        assert parsed.log_entries[1].level.value == "error"
        everything = (await http.get(f"/sandboxes/{sid}/logs", headers=AUTH)).json()
        assert len(everything["logs"]) == len(everything["logEntries"]) == 5
        request = stack.nodeagent.log_requests[-1]
        assert request.limit == 1000 and not request.backward
        assert abs(request.start_ms - (time.time() * 1000 - 7 * 24 * 3600 * 1000)) < 60_000
        unbounded = await http.get(f"/sandboxes/{sid}/logs?limit={10**12}", headers=AUTH)
        assert len(unbounded.json()["logs"]) == 5
        assert (await http.get(f"/sandboxes/{sid}/logs?limit=many", headers=AUTH)
                ).status_code == 400


async def test_a_paused_sandbox_answers_its_logs_and_a_killed_one_is_not_found(
    stack: Stack,
) -> None:
    async with await _client(stack) as http:
        sid = await _logged(stack, http)
        assert (await http.post(f"/sandboxes/{sid}/pause", headers=AUTH)).status_code == 204
        assert stack.view.sandbox_records[sid].state == PAUSED
        paused = await http.get(f"/v2/sandboxes/{sid}/logs", headers=AUTH)
        assert len(paused.json()["logs"]) == 5
        assert (await http.delete(f"/sandboxes/{sid}", headers=AUTH)).status_code == 204
        assert (await http.get(f"/v2/sandboxes/{sid}/logs", headers=AUTH)).status_code == 404
        assert (await http.get(f"/sandboxes/{sid}/logs", headers=AUTH)).status_code == 404
