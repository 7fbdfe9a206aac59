"""The HTTP edge's holding of requests by their key (keys/open_requests.py): a request made with
a valid key runs held by it, cut when the key is revoked, counted against its cap."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aenv_common.errors import ResourceExhausted
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.keys.open_requests import KeyRevoked, OpenRequests
from aenv_gateway.rest.errors import typed_error_response


class RevocableRequests:
    """The ASGI app around the edge's that holds each request made with a key."""

    def __init__(self, app: ASGIApp, auth: ApiKeyAuth, requests: OpenRequests) -> None:
        self._app = app
        self._auth = auth
        self._requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key_id = None
        if scope["type"] in ("http", "websocket"):
            key_id = self._auth.identify(Headers(scope=scope).get("x-api-key"))
        if key_id is None:
            await self._app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] in ("http.response.start", "websocket.accept")
            await send(message)

        try:
            async with self._requests.held(key_id):
                await self._app(scope, receive, watched)
        except (ResourceExhausted, KeyRevoked) as err:
            if not started and scope["type"] == "http":
                await typed_error_response(err)(scope, receive, send)
