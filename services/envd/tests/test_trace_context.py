"""envd continues the caller's W3C trace: a request with `traceparent` gets a span of the same
trace (a fresh span id, the caller's span its parent) handed back in `traceresponse` with its
duration in `server-timing`, and logged; a request without one, or with an invalid one, gets
nothing. Also for a request the token check refuses."""

from __future__ import annotations

import logging

import pytest
from starlette.testclient import TestClient

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.state import SandboxState
from aenv_envd.tracecontext import parse_traceparent

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def client() -> TestClient:
    state = SandboxState()
    state.access_token = "secret"
    return TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state))


def test_a_traced_request_gets_a_span_of_the_same_trace(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="aenv_envd.tracecontext"):
        resp = client.get("/envs", headers={"traceparent": TRACEPARENT, "x-access-token": "secret"})
    assert resp.status_code == 200
    version, trace_id, span_id, flags = resp.headers["traceresponse"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert len(span_id) == 16 and span_id not in (PARENT_ID, "0" * 16)
    assert resp.headers["server-timing"].startswith("envd;dur=")
    assert float(resp.headers["server-timing"].removeprefix("envd;dur=")) >= 0
    assert f"trace_id={TRACE_ID} span_id={span_id} parent_span_id={PARENT_ID}" in caplog.text


def test_a_refused_request_is_still_part_of_the_trace(client: TestClient) -> None:
    resp = client.get("/envs", headers={"traceparent": TRACEPARENT})
    assert resp.status_code == 401
    assert resp.headers["traceresponse"].split("-")[1] == TRACE_ID


@pytest.mark.parametrize(
    "header",
    [
        None,
        f"01-{TRACE_ID}-{PARENT_ID}-01",  # an unknown version
        f"00-{'0' * 32}-{PARENT_ID}-01",  # invalid trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # invalid parent
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # upper-case hex is invalid
        "garbage",
    ],
)
def test_no_valid_trace_context_no_span(client: TestClient, header: str | None) -> None:
    headers = {"x-access-token": "secret"} | ({"traceparent": header} if header else {})
    resp = client.get("/envs", headers=headers)
    assert resp.status_code == 200
    assert "traceresponse" not in resp.headers and "server-timing" not in resp.headers


def test_parse_traceparent() -> None:
    assert parse_traceparent(TRACEPARENT) == (TRACE_ID, PARENT_ID, "01")
    assert parse_traceparent(f" {TRACEPARENT} ") == (TRACE_ID, PARENT_ID, "01")
    assert parse_traceparent(TRACEPARENT + "-extra") is None
