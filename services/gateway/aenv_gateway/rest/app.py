"""The HTTP edge: control-plane routes win; sandbox traffic goes to the data plane; anything
else is a JSON 404 (spec e2b-compat Appendix A)."""

from __future__ import annotations

import re

from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from aenv_common.errors import AenvError
from aenv_common.httpproxy import deny_websocket
from aenv_common.sandbox_routing import target_from_headers
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.metrics import RequestMetrics
from aenv_gateway.rest.boundary import ControlBoundary
from aenv_gateway.rest.dataplane import DataPlane, drain_body
from aenv_gateway.rest.dispatch import target_from_host
from aenv_gateway.rest.edge_limits import EdgeLimits, bounded_body
from aenv_gateway.rest.errors import error_response, typed_error_response
from aenv_gateway.rest.routes import health
from aenv_gateway.rest.routes.sandboxes import SandboxRoutes
from aenv_gateway.rest.routes.snapshots import SnapshotRoutes
from aenv_gateway.rest.routes.templates import TemplateRoutes
from aenv_gateway.rest.signed_urls import SignedFileRouter


def control_routes(
    sandboxes: SandboxRoutes, snapshots: SnapshotRoutes, templates: TemplateRoutes,
) -> list[BaseRoute]:
    return [*health.routes(), *sandboxes.routes(), *snapshots.routes(), *templates.routes()]


AMBIGUOUS_PATHS = frozenset({"/health", "/metrics"})
_CONVERTER = re.compile(r":\w+}")


class GatewayApp:
    def __init__(
        self,
        routes: list[BaseRoute],
        dataplane: DataPlane,
        domain: str | None,
        signed_files: SignedFileRouter,
        limits: EdgeLimits,
        auth: ApiKeyAuth,
    ) -> None:
        self._router = Router(routes=routes)
        self._control_plane = ControlBoundary(self._router, auth)
        self._dataplane = dataplane
        self._domain = domain
        self._signed_files = signed_files
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._router(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self._domain and (by_host := target_from_host(headers.get("host", ""), self._domain)):
            await self._dataplane(scope, receive, send, by_host)
            return
        match = self._control_match(scope)
        # Ambiguous paths (GET /health) are the sandbox's when the request names a sandbox.
        if match is Match.FULL and scope["path"] not in AMBIGUOUS_PATHS:
            await self._control(scope, receive, send)
            return
        try:
            target = target_from_headers(headers)
            if target is None and match is not Match.FULL:
                target = self._signed_files.target(scope)
        except AenvError as err:
            await self._refuse(scope, receive, send, typed_error_response(err))
            return
        if target is None and match is Match.FULL:
            await self._control(scope, receive, send)
            return
        if target is not None:
            await self._dataplane(scope, receive, send, target)
            return
        method, path = scope.get("method", "GET"), scope["path"]
        if match is Match.PARTIAL:
            response = error_response(405, f"method not allowed: {method} {path}")
            # RFC 9110: a 405 names the methods the resource has.
            response.headers["Allow"] = ", ".join(self._allowed_methods(scope))
        else:
            response = error_response(404, f"route not found: {method} {path}")
        await self._refuse(scope, receive, send, response)

    async def _control(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._control_plane(scope, bounded_body(scope, receive, self._limits), send)

    def _control_match(self, scope: Scope) -> Match:
        best = Match.NONE
        for route in self._router.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return match
            if match is Match.PARTIAL:
                best = Match.PARTIAL
        return best

    def _allowed_methods(self, scope: Scope) -> list[str]:
        """The methods of the resource the path names: the routes of the first path template
        that matches it (as the router picks; `{id}` and `{id:path}` are one template), not
        of broader templates further down."""
        partial = [r for r in self._router.routes if r.matches(scope)[0] is Match.PARTIAL]
        templates = [_CONVERTER.sub("}", getattr(r, "path", "")) for r in partial]
        methods: set[str] = set()
        for route, template in zip(partial, templates, strict=True):
            if template == templates[0]:
                methods.update(getattr(route, "methods", None) or ())
        return sorted(methods)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, response: Response) -> None:
        if scope["type"] == "websocket":
            await deny_websocket(WebSocket(scope, receive, send), response)
        else:
            await drain_body(Request(scope, receive))
            await response(scope, receive, send)


def instrumented(app: ASGIApp) -> ASGIApp:
    """Server spans for every request (the W3C traceparent of the caller becomes their parent),
    and its count and time (metrics.py)."""
    return OpenTelemetryMiddleware(RequestMetrics(app))
