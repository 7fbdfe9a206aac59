"""Guest ports through the gateway: by `E2b-Sandbox-Port` header and by Host
`<port>-<id>.<domain>` (the URLs `get_host` returns), for plain HTTP, streamed responses and
WebSockets. The guest server is started with the SDK itself."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import websockets
from e2b import Sandbox

from aenv_cli.platform import Platform

from ..conftest import GATEWAY_DOMAIN

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

APP_PORT = 8080
SERVER = Path(__file__).parent / "guest" / "app_server.py"


@contextlib.contextmanager
def serving_app(sbx: Sandbox, platform: Platform, headers: dict[str, str]) -> Iterator[Sandbox]:
    """The guest app on APP_PORT, answering through the gateway with `headers`."""
    sbx.files.write("/home/user/app_server.py", SERVER.read_text())
    handle = sbx.commands.run(
        f"python3 /home/user/app_server.py {APP_PORT}", background=True, timeout=0
    )
    try:
        deadline = time.monotonic() + 60
        while _get(platform, sbx.sandbox_id, headers).status_code != 200:
            assert time.monotonic() < deadline, "guest app did not come up"
            time.sleep(0.5)
        yield sbx
    finally:
        handle.kill()


@pytest.fixture(scope="module")
def app(sbx: Sandbox, platform: Platform) -> Iterator[Sandbox]:
    with serving_app(sbx, platform, {}) as serving:
        yield serving


def _by_header(sandbox_id: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(APP_PORT)}


def _get(platform: Platform, sandbox_id: str, headers: dict[str, str] | None = None
         ) -> httpx.Response:
    return httpx.get(platform.sandbox_url, headers={**_by_header(sandbox_id), **(headers or {})},
                     timeout=120)


def test_private_ports_need_the_traffic_token_and_see_the_masked_host(
    e2b_vars: dict[str, str], platform: Platform
) -> None:
    sandbox = Sandbox.create(timeout=300, network={
        "allow_public_traffic": False, "mask_request_host": "${PORT}-masked.example.com"})
    try:
        token = sandbox.traffic_access_token
        assert token
        with serving_app(sandbox, platform, {"e2b-traffic-access-token": token}):
            assert _get(platform, sandbox.sandbox_id).status_code == 403
            wrong = _get(platform, sandbox.sandbox_id, {"e2b-traffic-access-token": "x" * 32})
            assert wrong.status_code == 403
            right = _get(platform, sandbox.sandbox_id, {"e2b-traffic-access-token": token})
            assert right.text == f"hello from guest / host={APP_PORT}-masked.example.com"
            # envd's port has its own token: the SDK never sends the traffic one.
            assert sandbox.commands.run("echo ok").stdout == "ok\n"
    finally:
        sandbox.kill()


def _gateway_socket(platform: Platform) -> socket.socket:
    parts = urlsplit(platform.sandbox_url)
    assert parts.hostname and parts.port
    return socket.create_connection((parts.hostname, parts.port))


def test_get_host_names_the_port_under_our_domain(app: Sandbox) -> None:
    assert app.get_host(APP_PORT) == f"{APP_PORT}-{app.sandbox_id}.{GATEWAY_DOMAIN}"


@pytest.mark.parametrize("routing", ["header", "host"])
def test_plain_http(app: Sandbox, platform: Platform, routing: str) -> None:
    host = app.get_host(APP_PORT)
    headers = _by_header(app.sandbox_id) if routing == "header" else {"Host": host}
    response = httpx.get(f"{platform.sandbox_url}/hello?x=1", headers=headers, timeout=120)
    assert response.status_code == 200
    assert response.text.startswith("hello from guest /hello?x=1")


@pytest.mark.parametrize("routing", ["header", "host"])
def test_streamed_response_arrives_as_produced(
    app: Sandbox, platform: Platform, routing: str
) -> None:
    headers = (
        _by_header(app.sandbox_id) if routing == "header"
        else {"Host": app.get_host(APP_PORT)}
    )
    arrivals: list[float] = []
    lines: list[str] = []
    with httpx.stream("GET", f"{platform.sandbox_url}/stream", headers=headers,
                      timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            arrivals.append(time.monotonic())
            lines.append(line)
    assert [line.split()[0] for line in lines] == [f"chunk{i}" for i in range(5)]
    # The server sleeps 0.5 s between chunks: a buffering hop would deliver them all at once.
    assert arrivals[-1] - arrivals[0] > 1.5


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("routing", ["header", "host"])
async def test_websocket_echo(app: Sandbox, platform: Platform, routing: str) -> None:
    if routing == "header":
        uri = f"{platform.sandbox_url.replace('http', 'ws', 1)}/ws"
        ws = websockets.connect(uri, additional_headers=_by_header(app.sandbox_id))
    else:
        # The URL names the sandbox host; the connection goes to the gateway (no wildcard DNS).
        port = urlsplit(platform.sandbox_url).port
        uri = f"ws://{app.get_host(APP_PORT)}:{port}/ws"
        ws = websockets.connect(uri, sock=_gateway_socket(platform))
    async with ws as conn:
        for message in ("one", "two", "x" * 5000):
            await conn.send(message)
            assert await conn.recv() == "echo:" + message


def test_closed_port_and_unknown_sandbox_by_host(app: Sandbox, platform: Platform) -> None:
    closed = httpx.get(platform.sandbox_url,
                       headers={"Host": f"9999-{app.sandbox_id}.{GATEWAY_DOMAIN}"}, timeout=120)
    assert closed.status_code == 502 and "port is not open" in closed.json()["message"]
    unknown = httpx.get(platform.sandbox_url,
                        headers={"Host": f"{APP_PORT}-nosuchsandbox00000.{GATEWAY_DOMAIN}"})
    assert unknown.status_code == 502 and "was not found" in unknown.json()["message"]
