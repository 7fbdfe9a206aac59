"""The first acceptance program: the unmodified E2B SDK program runs against a single-node
install, and the platform's edges behave (auth, bad input, data-plane errors, tracing)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from aenv_cli.platform import Platform
from aenv_common.telemetry import read_trace_files

# Plain (sync) tests: they drive the platform the way a user's program does, from outside.
pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

PROGRAM = Path(__file__).parent / "programs" / "acceptance_program.py"


def test_issue_program_runs_unmodified(platform: Platform, e2b_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, str(PROGRAM)], env=e2b_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "Debian GNU/Linux 12" in done.stdout
    # The guest runs Debian's cloud kernel, not the host's.
    assert "-cloud-amd64" in done.stdout


def _api(platform: Platform) -> httpx.Client:
    return httpx.Client(base_url=platform.api_url, headers={"X-API-Key": platform.api_key},
                        timeout=120)


def test_health_needs_no_key(platform: Platform) -> None:
    resp = httpx.get(f"{platform.api_url}/health")
    assert resp.status_code == 200


@pytest.mark.parametrize("key", [None, "e2b_" + "0" * 40])
def test_missing_or_wrong_key_is_401_json(platform: Platform, key: str | None) -> None:
    headers = {"X-API-Key": key} if key else {}
    resp = httpx.post(f"{platform.api_url}/v2/sandboxes", json={"templateID": "base"},
                      headers=headers)
    assert resp.status_code == 401
    body = resp.json()
    assert body["code"] == 401 and isinstance(body["message"], str)


def test_unknown_template_is_404_json(platform: Platform) -> None:
    with _api(platform) as api:
        resp = api.post("/v2/sandboxes", json={"templateID": "no-such-template"})
    assert resp.status_code == 404
    assert resp.json()["code"] == 404
    assert "no-such-template" in resp.json()["message"]


def test_malformed_json_is_400(platform: Platform) -> None:
    with _api(platform) as api:
        resp = api.post("/v2/sandboxes", content=b"{not json",
                        headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    assert resp.json()["code"] == 400


def test_unknown_sandbox_on_data_plane_is_502(platform: Platform) -> None:
    resp = httpx.get(f"{platform.sandbox_url}/health",
                     headers={"E2b-Sandbox-Id": "nosuchsandbox", "E2b-Sandbox-Port": "49983"})
    assert resp.status_code == 502
    assert "was not found" in resp.json()["message"]


def test_closed_guest_port_is_502_port_not_open(platform: Platform) -> None:
    with _api(platform) as api:
        created = api.post("/v2/sandboxes", json={"templateID": "base"})
        assert created.status_code == 201, created.text
        sid = created.json()["sandboxID"]
        try:
            resp = httpx.get(f"{platform.sandbox_url}/", timeout=30,
                             headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "8080"})
            assert resp.status_code == 502
            assert "port is not open" in resp.json()["message"]
        finally:
            assert api.delete(f"/sandboxes/{sid}").status_code == 204
        assert api.get(f"/sandboxes/{sid}").status_code == 404


def test_envd_access_token_is_enforced(platform: Platform) -> None:
    with _api(platform) as api:
        created = api.post("/v2/sandboxes", json={"templateID": "base"}).json()
        sid, token = created["sandboxID"], created["envdAccessToken"]
        headers = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                   "Content-Type": "application/json"}
        try:
            url = f"{platform.sandbox_url}/filesystem.Filesystem/Stat"
            denied = httpx.post(url, json={"path": "/"}, headers=headers)
            assert denied.status_code == 401
            allowed = httpx.post(url, json={"path": "/"},
                                 headers={**headers, "X-Access-Token": token})
            assert allowed.status_code == 200, allowed.text
            assert allowed.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"
        finally:
            api.delete(f"/sandboxes/{sid}")


def test_create_is_one_trace_across_services(platform: Platform) -> None:
    with _api(platform) as api:
        sid = api.post("/v2/sandboxes", json={"templateID": "base"}).json()["sandboxID"]
        api.delete(f"/sandboxes/{sid}")
    deadline = time.monotonic() + 10
    services: set[str] = set()
    while time.monotonic() < deadline:
        spans = read_trace_files(platform.home / "traces")
        mine = [s for s in spans if s["attributes"].get("aenv.sandbox_id") == sid]
        trace_ids = {s["trace_id"] for s in mine if s["name"] == "sandbox.create"}
        if trace_ids:
            (trace_id,) = trace_ids
            services = {s["service"] for s in spans if s["trace_id"] == trace_id}
            if {"gateway", "scheduler", "nodeagent"} <= services:
                break
        time.sleep(0.2)
    assert {"gateway", "scheduler", "nodeagent"} <= services, json.dumps(sorted(services))
