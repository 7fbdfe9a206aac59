"""The envd ASGI application: Connect RPC routes, /files and control endpoints, token check."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import EnvdConfig
from .connect import make_endpoint
from .control_http import ControlEndpoints
from .errors import UNAUTHORIZED_MESSAGE
from .files_http import FilesEndpoint
from .filesystem_service import FilesystemService
from .process_service import ProcessService
from .processes import ProcessManager
from .state import SandboxState
from .tracecontext import TraceContextMiddleware

UNAUTHORIZED_BODY = json.dumps(
    {
        "code": 401,
        "message": UNAUTHORIZED_MESSAGE,
    }
).encode()
# /files checks the token or a URL signature itself.
_TOKEN_EXEMPT = {"/health", "/files"}


class AccessTokenMiddleware:
    """Every request but /health and /files needs X-Access-Token once /init set a token."""

    def __init__(self, app: ASGIApp, state: SandboxState) -> None:
        self._app = app
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _TOKEN_EXEMPT:
            presented = None
            for name, value in scope["headers"]:
                if name == b"x-access-token":
                    presented = value.decode("latin-1")
            if not self._state.token_matches(presented):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self._app(scope, receive, send)


def build_app(config: EnvdConfig, state: SandboxState | None = None) -> TraceContextMiddleware:
    state = state or SandboxState()
    processes = ProcessService(ProcessManager(config.finished_retention_s), state)
    filesystem = FilesystemService(state)
    control = ControlEndpoints(state, config)
    files = FilesEndpoint(state, config.gzip_level)
    routes = [
        Route(f"/process.Process/{name}", make_endpoint(method), methods=["POST"])
        for name, method in processes.methods().items()
    ]
    routes += [
        Route(f"/filesystem.Filesystem/{name}", make_endpoint(method), methods=["POST"])
        for name, method in filesystem.methods().items()
    ]
    routes += [
        Route("/health", control.health, methods=["GET"]),
        Route("/init", control.init, methods=["POST"]),
        Route("/sync", control.sync, methods=["POST"]),
        Route("/envs", control.envs, methods=["GET"]),
        Route("/metrics", control.metrics, methods=["GET"]),
        Route("/files", files.get, methods=["GET"]),
        Route("/files", files.post, methods=["POST"]),
    ]
    # Outermost: a refused request is still part of its caller's trace.
    return TraceContextMiddleware(AccessTokenMiddleware(Starlette(routes=routes), state))
