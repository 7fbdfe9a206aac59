"""This node's data-plane proxy: gateway → here → the sandbox's netns → the guest port.

Requests carry `E2b-Sandbox-Id` / `E2b-Sandbox-Port` (the gateway keeps them); the sandbox's guest
ports are reachable at its netns address through the DNAT rules of its slot.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, PermissionDenied
from aenv_common.httpproxy import (
    StreamingProxy,
    UpstreamRefused,
    UpstreamUnavailable,
    deny_websocket,
)
from aenv_common.sandbox_routing import (
    ENVD_PORT,
    bad_gateway,
    port_not_open,
    sandbox_not_found,
    target_from_headers,
)
from aenv_nodeagent.sandboxes import SandboxManager

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token"


@dataclass(frozen=True)
class Upstream:
    sandbox_id: str
    # The guest port's base URL; None when the sandbox is not running here.
    base: str | None
    extra_headers: dict[str, str]


def app_port_headers(
    record: cluster_pb2.SandboxRecord, port: int, headers: Mapping[str, str]
) -> dict[str, str]:
    """What the sandbox's network settings ask of traffic to an app port (envd's port has its
    own token): the traffic access token of private sandboxes, and the masked Host."""
    if port == ENVD_PORT:
        return {}
    token = record.traffic_access_token
    if record.network.private_traffic and not hmac.compare_digest(
        headers.get(TRAFFIC_TOKEN_HEADER, "").encode(), token.encode()
    ):
        raise PermissionDenied(
            f"sandbox {record.sandbox_id} only accepts traffic carrying its "
            f"{TRAFFIC_TOKEN_HEADER} header")
    mask = record.network.mask_request_host
    return {"Host": mask.replace("${PORT}", str(port))} if mask else {}


def build_proxy_app(manager: SandboxManager, session: aiohttp.ClientSession) -> Starlette:
    proxy = StreamingProxy(session)

    def upstream(headers: Mapping[str, str]) -> Upstream:
        target = target_from_headers(headers)
        if target is None:
            return Upstream("", None, {})
        sandbox = manager.find(target.sandbox_id)
        if sandbox is None:
            return Upstream(target.sandbox_id, None, {})
        return Upstream(target.sandbox_id, f"http://{sandbox.host}:{target.port}",
                        app_port_headers(sandbox.record, target.port, headers))

    async def forward(request: Request) -> Response:
        try:
            up = upstream(request.headers)
        except AenvError as err:
            return _error(err)
        if up.base is None:
            return sandbox_not_found(up.sandbox_id)
        try:
            return await proxy.forward(request, up.base, up.extra_headers)
        except UpstreamRefused:
            return port_not_open(up.sandbox_id)
        except UpstreamUnavailable as err:
            return bad_gateway(up.sandbox_id, f"The sandbox is unreachable: {err.message}")

    async def forward_ws(websocket: WebSocket) -> None:
        try:
            up = upstream(websocket.headers)
            if up.base is None:
                await deny_websocket(websocket, sandbox_not_found(up.sandbox_id))
                return
            await proxy.forward_websocket(websocket, up.base, up.extra_headers)
        except (UpstreamRefused, UpstreamUnavailable):
            await deny_websocket(websocket, port_not_open(up.sandbox_id))
        except AenvError as err:  # a refused token, a bad port, the guest's own refusal
            await deny_websocket(websocket, _error(err))

    return Starlette(
        routes=[
            Route("/{path:path}", forward, methods=_METHODS),
            WebSocketRoute("/{path:path}", forward_ws),
        ]
    )


def _error(err: AenvError) -> JSONResponse:
    return JSONResponse({"code": err.http_status, "message": err.message}, err.http_status)
