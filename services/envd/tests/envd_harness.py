"""Test harness: a real envd subprocess on loopback and a tiny fake E2B control plane."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_testing.ports import free_port

REPO = Path(__file__).resolve().parents[3]
ENVD_PYTHONPATH = os.pathsep.join(
    [str(REPO / "gen" / "python" / "src"), str(REPO / "services" / "envd")]
)


@dataclass
class EnvdProcess:
    url: str
    token: str
    process: subprocess.Popen[bytes]

    def init(self, body: Mapping[str, object]) -> int:
        import json

        request = urllib.request.Request(
            self.url + "/init",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-access-token": self.token},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"envd exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 204:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("envd did not become healthy")


def start_envd(extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": ENVD_PYTHONPATH,
        # Never touch the host clock or credit host entropy from tests.
        "AENV_ENVD_SYNC_CLOCK": "0",
        "AENV_ENVD_RESEED_RNG": "0",
        **(extra_env or {}),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "aenv_envd", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
    )
    return process, f"http://127.0.0.1:{port}"


def _sessions_of_children(parent_pid: int) -> set[int]:
    """Session ids of the direct children of `parent_pid` (envd starts each in its own session)."""
    sessions: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent_pid:
            sessions.add(int(fields[3]))
    return sessions


def _kill_sessions(sessions: set[int]) -> None:
    """Kills every process left in the given sessions (children envd started for a test)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) in sessions and int(entry) != os.getpid():
            try:
                os.kill(int(entry), 9)
            except ProcessLookupError:
                pass


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Stops envd and kills what it spawned: its children outlive it by design."""
    sessions = _sessions_of_children(process.pid) - {os.getsid(0)}
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _kill_sessions(sessions)


@pytest.fixture
def envd() -> Iterator[EnvdProcess]:
    process, url = start_envd()
    try:
        _wait_healthy(url, process)
        handle = EnvdProcess(url=url, token=secrets.token_hex(16), process=process)
        # First /init: no token configured yet, so none is needed.
        # Default user nobody: root's login shell on this host runs pyenv hooks that must not be
        # killed midway (they leave a lock behind).
        init = {
            "accessToken": handle.token,
            "envVars": {"SBX_GLOBAL": "g1"},
            "defaultUser": "nobody",
        }
        assert handle.init(init) == 204
        yield handle
    finally:
        stop_process(process)


@dataclass
class FakeControlPlane:
    url: str
    killed: list[str]


@pytest.fixture
def control_plane(envd: EnvdProcess) -> Iterator[FakeControlPlane]:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from aenv_envd.version import ENVD_VERSION

    killed: list[str] = []

    async def create(request: Request) -> Response:
        template = (await request.json()).get("templateID", "base")
        # Template "wrong-token" hands the SDK a token envd does not accept.
        token = "not-the-token" if template == "wrong-token" else envd.token
        return JSONResponse(
            {
                "templateID": "base",
                "sandboxID": "sbxtest" + secrets.token_hex(4),
                "clientID": "cl",
                "envdVersion": ENVD_VERSION,
                "envdAccessToken": token,
                "trafficAccessToken": None,
                "domain": None,
                "alias": "base",
            },
            status_code=201,
        )

    async def kill(request: Request) -> Response:
        killed.append(request.path_params["sandbox_id"])
        return Response(status_code=204)

    app = Starlette(
        routes=[
            Route("/v2/sandboxes", create, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}", kill, methods=["DELETE"]),
        ]
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield FakeControlPlane(url=f"http://127.0.0.1:{port}", killed=killed)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def sdk_env(
    envd: EnvdProcess, control_plane: FakeControlPlane, monkeypatch: pytest.MonkeyPatch
) -> EnvdProcess:
    monkeypatch.setenv("E2B_API_URL", control_plane.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", envd.url)
    monkeypatch.setenv("E2B_API_KEY", "e2b_" + "0123456789abcdef" * 2 + "01234567")
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    return envd
