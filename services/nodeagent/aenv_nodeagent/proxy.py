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

from aenv_common.errors import InvalidArgument
from aenv_common.httpproxy import StreamingProxy, UpstreamRefused, UpstreamUnavailable
from aenv_common.sandbox_routing import (
    bad_gateway,
    port_not_open,
    sandbox_not_found,
    target_from_headers,
)
from aenv_nodeagent.sandboxes import SandboxManager

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def build_proxy_app(manager: SandboxManager, session: aiohttp.ClientSession) -> Starlette:
    proxy = StreamingProxy(session)

    def upstream(headers: Mapping[str, str]) -> tuple[str, str | None]:
        """(sandbox id, guest base URL or None when the sandbox is not running here)."""
        target = target_from_headers(headers)
        if target is None:
            return "", None
        sandbox = manager.find(target.sandbox_id)
        base = f"http://{sandbox.host}:{target.port}" if sandbox else None
        return target.sandbox_id, base

    async def forward(request: Request) -> Response:
        try:
            sandbox_id, base = upstream(request.headers)
        except InvalidArgument as err:
            return JSONResponse({"code": 400, "message": err.message}, 400)
        if base is None:
            return sandbox_not_found(sandbox_id)
        try:
            return await proxy.forward(request, base)
        except UpstreamRefused:
            return port_not_open(sandbox_id)
        except UpstreamUnavailable as err:
            return bad_gateway(sandbox_id, f"The sandbox is unreachable: {err.message}")

    async def forward_ws(websocket: WebSocket) -> None:
        try:
            _, base = upstream(websocket.headers)
        except InvalidArgument:
            base = None
        if base is None:
            await websocket.close(code=1011, reason="The sandbox was not found")
            return
        try:
            await proxy.forward_websocket(websocket, base)
        except (UpstreamRefused, UpstreamUnavailable):
            await websocket.close(code=1011, reason="The sandbox is running but port is not open")

    return Starlette(
        routes=[
            Route("/{path:path}", forward, methods=_METHODS),
            WebSocketRoute("/{path:path}", forward_ws),
        ]
    )
