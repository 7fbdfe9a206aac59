"""Requests made with a stored API key are cut when the key is revoked (issue 18): the ASGI
app around the edge's that runs each such request as a task of its key (api_keys.OpenRequests).
A request cut before its answer started is answered 401; one whose answer was flowing (a
stream) ends there, its connection closed."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aenv_gateway.api_keys import OpenRequests
from aenv_gateway.auth import ADMIN_KEY_ID, ApiKeyAuth
from aenv_gateway.http_errors import error_response


class RevocableRequests:
    def __init__(self, app: ASGIApp, auth: ApiKeyAuth, requests: OpenRequests) -> None:
        self._app = app
        self._auth = auth
        self._requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key_id = None
        if scope["type"] in ("http", "websocket"):
            key_id = self._auth.identify(Headers(scope=scope).get("x-api-key"))
        if key_id is None or key_id == ADMIN_KEY_ID:  # the configured key is never revoked
            await self._app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] in ("http.response.start", "websocket.accept")
            await send(message)

        finished = await self._requests.run(key_id, self._app(scope, receive, watched))
        if not finished and not started and scope["type"] == "http":
            await error_response(401, "Invalid API key")(scope, receive, send)
