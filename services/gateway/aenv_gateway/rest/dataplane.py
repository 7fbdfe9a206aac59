"""Sandbox traffic: resolve the owner from the directory and stream to its node's proxy; a paused
sandbox created with auto-resume is resumed first.

The node proxy routes by the `E2b-Sandbox-Id`/`E2b-Sandbox-Port` headers (set here also for
Host-routed requests) and itself answers 502 "port is not open" for closed guest ports; that
answer passes through unchanged. `X-Access-Token` passes through untouched: envd enforces it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from aenv_common.errors import AenvError
from aenv_common.events import death_message
from aenv_common.httpproxy import HandshakeRejected, StreamingProxy, deny_websocket
from aenv_common.sandbox_routing import (
    ENVD_PORT,
    NOT_FOUND_MESSAGE,
    SandboxTarget,
    bad_gateway,
    sandbox_not_found,
    stream_ended,
)
from aenv_common.status_tables import http_status
from aenv_gateway.cluster.directory import Located
from aenv_gateway.core.events.deaths import Deaths

log = logging.getLogger(__name__)

# What envd serves to SDKs; everything else on its port (/init, ...) is for the node agent only.
_ENVD_PUBLIC_PATHS = frozenset({"/health", "/files", "/envs", "/metrics"})
_ENVD_PUBLIC_PREFIXES = ("/process.Process/", "/filesystem.Filesystem/")
_DRAIN_LIMIT = 8 << 20


def envd_path_is_public(path: str) -> bool:
    return path in _ENVD_PUBLIC_PATHS or path.startswith(_ENVD_PUBLIC_PREFIXES)


def node_unreachable(sandbox_id: str) -> JSONResponse:
    return bad_gateway(sandbox_id, "The sandbox node is unreachable")


def resume_failed(sandbox_id: str, reason: str) -> JSONResponse:
    return bad_gateway(sandbox_id, f"The sandbox could not be resumed: {reason}")


def forbidden(path: str) -> JSONResponse:
    return JSONResponse({"code": 403, "message": f"{path} is not reachable from outside"}, 403)


# The running sandbox to forward to (paused ones with auto-resume are resumed), or None.
Waker = Callable[[str], Awaitable[Located | None]]


class DataPlane:
    def __init__(self, wake: Waker, proxy: StreamingProxy, deaths: Deaths | None = None) -> None:
        self._wake = wake
        self._proxy = proxy
        self._deaths = deaths

    async def _not_found(self, sandbox_id: str) -> JSONResponse:
        return await self._died(sandbox_id) or sandbox_not_found(sandbox_id)

    async def _died(self, sandbox_id: str) -> JSONResponse | None:
        """A dead sandbox's answer: still E2B's 502 and its words (the SDKs raise
        SandboxNotRunningException on them), the certificate's after them. None: no death."""
        certificate = await self._deaths.certificate(sandbox_id) if self._deaths else None
        if certificate is None:
            return None
        return bad_gateway(sandbox_id, f"{NOT_FOUND_MESSAGE}: {death_message(certificate)}")

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, target: SandboxTarget
    ) -> None:
        if scope["type"] == "websocket":
            await self._websocket(WebSocket(scope, receive, send), target)
            return
        response = await self._http(Request(scope, receive), target)
        await response(scope, receive, send)

    async def _refusal(
        self, path: str, target: SandboxTarget
    ) -> tuple[Located | None, Response | None]:
        if target.port == ENVD_PORT and not envd_path_is_public(path):
            return None, forbidden(path)
        try:
            located = await self._wake(target.sandbox_id)
        except AenvError as err:
            log.warning("auto-resume failed",
                        extra={"sandbox_id": target.sandbox_id, "error": err.message})
            return None, resume_failed(target.sandbox_id, err.message)
        # Paused sandboxes without auto-resume answer "not found", like unknown ones.
        if located is None:
            return None, await self._not_found(target.sandbox_id)
        return located, None

    async def _http(self, request: Request, target: SandboxTarget) -> Response:
        located, refusal = await self._refusal(request.url.path, target)
        if refusal is not None or located is None:
            await drain_body(request)
            return refusal or sandbox_not_found(target.sandbox_id)
        try:
            response = await self._proxy.forward(request, _base(located), target.headers(),
                                                 stream_ended(target.sandbox_id))
        except AenvError as err:
            log.warning(
                "node proxy unreachable",
                extra={"sandbox_id": target.sandbox_id, "error": err.message},
            )
            return node_unreachable(target.sandbox_id)
        if response.status_code == 502 and isinstance(response, StreamingResponse):
            # The node no longer has it (it died since the directory last heard): say why.
            died = await self._died(target.sandbox_id)
            if died is not None:
                await _drain(response)
                return died
        return response

    async def _websocket(self, websocket: WebSocket, target: SandboxTarget) -> None:
        located, refusal = await self._refusal(websocket.url.path, target)
        if refusal is None and located is not None:
            try:
                await self._proxy.forward_websocket(
                    websocket, _base(located), target.headers()
                )
                return
            except HandshakeRejected as err:
                status = http_status(err)
                refusal = JSONResponse({"code": status, "message": err.message}, status)
            except AenvError as err:
                log.warning(
                    "node proxy unreachable",
                    extra={"sandbox_id": target.sandbox_id, "error": err.message},
                )
                refusal = node_unreachable(target.sandbox_id)
        await deny_websocket(websocket, refusal or await self._not_found(target.sandbox_id))


async def drain_body(request: Request, limit: int = _DRAIN_LIMIT) -> None:
    """Read what the client is still sending before refusing it. Answered mid-upload, the server
    closes the connection and the client (an SDK upload to a killed sandbox) reports a broken
    connection instead of the refusal. Bounded: a huge upload is cut off instead."""
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            return


async def _drain(response: StreamingResponse) -> None:
    """Reads (and so releases) the upstream answer of a response that will not be sent: the
    node proxy's small JSON 502."""
    async for _ in response.body_iterator:
        pass


def _base(located: Located) -> str:
    return f"http://{located.owner.proxy_address}"

