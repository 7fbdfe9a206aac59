"""This node's data-plane proxy: gateway → here → the sandbox's netns → the guest port.

Requests carry `E2b-Sandbox-Id` / `E2b-Sandbox-Port` (the gateway keeps them); the sandbox's guest
ports are reachable at its netns address through the DNAT rules of its slot.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from aenv_common.httpproxy import StreamingProxy, UpstreamRefused, UpstreamUnavailable
from aenv_nodeagent.envd_client import ENVD_PORT
from aenv_nodeagent.sandboxes import SandboxManager

SANDBOX_ID_HEADER = "e2b-sandbox-id"
SANDBOX_PORT_HEADER = "e2b-sandbox-port"
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _bad_gateway(sandbox_id: str, message: str) -> JSONResponse:
    return JSONResponse({"sandboxId": sandbox_id, "message": message, "code": 502}, status_code=502)


def _target(headers: Mapping[str, str], manager: SandboxManager) -> tuple[str, str, int]:
    sandbox_id = headers.get(SANDBOX_ID_HEADER) or ""
    try:
        port = int(headers.get(SANDBOX_PORT_HEADER) or ENVD_PORT)
    except ValueError:
        port = -1
    sandbox = manager.find(sandbox_id)
    return sandbox_id, (sandbox.host if sandbox else ""), port


def build_proxy_app(manager: SandboxManager, session: aiohttp.ClientSession) -> Starlette:
    proxy = StreamingProxy(session)

    async def forward(request: Request) -> Response:
        sandbox_id, host, port = _target(request.headers, manager)
        if not host:
            return _bad_gateway(sandbox_id, "The sandbox was not found")
        if not 0 < port < 65536:
            return JSONResponse({"code": 400, "message": "invalid E2b-Sandbox-Port"}, 400)
        try:
            return await proxy.forward(request, f"http://{host}:{port}")
        except UpstreamRefused:
            return _bad_gateway(sandbox_id, "The sandbox is running but port is not open")
        except UpstreamUnavailable as err:
            return _bad_gateway(sandbox_id, f"The sandbox is unreachable: {err.message}")

    async def forward_ws(websocket: WebSocket) -> None:
        _, host, port = _target(websocket.headers, manager)
        if not host or not 0 < port < 65536:
            await websocket.close(code=1011, reason="The sandbox was not found")
            return
        try:
            await proxy.forward_websocket(websocket, f"http://{host}:{port}")
        except (UpstreamRefused, UpstreamUnavailable):
            await websocket.close(code=1011, reason="The sandbox is running but port is not open")

    return Starlette(
        routes=[
            Route("/{path:path}", forward, methods=_METHODS),
            WebSocketRoute("/{path:path}", forward_ws),
        ]
    )
