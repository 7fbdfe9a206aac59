"""This node's data-plane proxy: gateway → here → the sandbox's netns → the guest port.

Requests carry `E2b-Sandbox-Id` / `E2b-Sandbox-Port` (the gateway keeps them); the sandbox's guest
ports are reachable at its netns address through the DNAT rules of its slot, over TLS for the ports
its create listed in `network.httpsPorts`.

Each VM's upstream connections live in a pool of their own that is closed when the VM stops
serving (kill, expiry, pause, reset, a VM that exited on its own): a guest that is gone sends no
RST, so a request on one of its kept-alive connections would otherwise wait forever. The streams
in flight on it are broken off (a Connect stream between two envelopes ends with E2B's
`unavailable` end-of-stream instead), so the gateway and the client see them end at once and
probe the sandbox, which then answers "not found".
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

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
    stream_ended,
    target_from_headers,
)
from aenv_common.status_tables import http_status
from aenv_nodeagent.sandbox.model import Sandbox

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token"


@dataclass(frozen=True)
class Upstream:
    sandbox_id: str
    # The guest port's base URL; None when the sandbox is not serving here.
    base: str | None
    extra_headers: dict[str, str]
    proxy: StreamingProxy | None = None


@dataclass
class _Pool:
    vm: object  # the VM its connections reach; a reset sandbox gets a new one
    session: aiohttp.ClientSession
    proxy: StreamingProxy

    async def close(self, sandbox_id: str, why: str = "") -> None:
        """`why`: words a Connect stream's end adds to E2B's (a death's certificate)."""
        self.proxy.cut(f"the connection to sandbox {sandbox_id} was cut: it stopped serving",
                       f"{stream_ended(sandbox_id)}: {why}" if why else None)
        await self.session.close()


class SandboxConnections:
    """One connection pool per sandbox VM, closed (with the requests in flight on it) by `cut`."""

    def __init__(self) -> None:
        self._pools: dict[str, _Pool] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def proxy(self, sandbox: Sandbox) -> StreamingProxy:
        sandbox_id = sandbox.record.sandbox_id
        pool = self._pools.get(sandbox_id)
        if pool is None or pool.vm is not sandbox.vm or pool.session.closed:
            if pool is not None:  # reached the VM this sandbox had before a reset
                task = asyncio.get_running_loop().create_task(pool.close(sandbox_id))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
            # ssl=False: a guest port listed in network.https_ports is dialled over TLS without
            # verifying its certificate (self-signed ones work), as E2B's proxy does.
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=False))
            pool = _Pool(sandbox.vm, session, StreamingProxy(session))
            self._pools[sandbox_id] = pool
        return pool.proxy

    async def cut(self, sandbox_id: str, why: str = "") -> None:
        """End every request and stream in flight to the sandbox's VM (`why`: as `_Pool.close`)."""
        pool = self._pools.pop(sandbox_id, None)
        if pool is not None:
            await pool.close(sandbox_id, why)

    async def close(self) -> None:
        for sandbox_id in list(self._pools):
            await self.cut(sandbox_id)
        await asyncio.gather(*self._closing)

    def __len__(self) -> int:
        return len(self._pools)


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


def guest_url(record: cluster_pb2.SandboxRecord, host: str, port: int) -> str:
    """A guest port's base URL: HTTPS for the ports its create listed in httpsPorts."""
    scheme = "https" if port in record.network.https_ports else "http"
    return f"{scheme}://{host}:{port}"


class ServingSandboxes(Protocol):
    def serving(self, sandbox_id: str) -> Sandbox | None: ...


def build_proxy_app(manager: ServingSandboxes, connections: SandboxConnections) -> Starlette:
    def upstream(headers: Mapping[str, str]) -> Upstream:
        target = target_from_headers(headers)
        if target is None:
            return Upstream("", None, {})
        sandbox = manager.serving(target.sandbox_id)
        if sandbox is None:
            return Upstream(target.sandbox_id, None, {})
        return Upstream(target.sandbox_id, guest_url(sandbox.record, sandbox.host, target.port),
                        app_port_headers(sandbox.record, target.port, headers),
                        connections.proxy(sandbox))

    def gone(sandbox_id: str, err: AenvError) -> JSONResponse:
        # Cut off because the sandbox left (killed, paused) while the request waited.
        if manager.serving(sandbox_id) is None:
            return sandbox_not_found(sandbox_id)
        return bad_gateway(sandbox_id, f"The sandbox is unreachable: {err.message}")

    async def forward(request: Request) -> Response:
        try:
            up = upstream(request.headers)
        except AenvError as err:
            return _error(err)
        if up.base is None or up.proxy is None:
            return sandbox_not_found(up.sandbox_id)
        try:
            return await up.proxy.forward(request, up.base, up.extra_headers,
                                          stream_ended(up.sandbox_id))
        except UpstreamRefused:
            return port_not_open(up.sandbox_id)
        except UpstreamUnavailable as err:
            return gone(up.sandbox_id, err)

    async def forward_ws(websocket: WebSocket) -> None:
        try:
            up = upstream(websocket.headers)
            if up.base is None or up.proxy is None:
                await deny_websocket(websocket, sandbox_not_found(up.sandbox_id))
                return
            await up.proxy.forward_websocket(websocket, up.base, up.extra_headers)
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
    status = http_status(err)
    return JSONResponse({"code": status, "message": err.message}, status)
