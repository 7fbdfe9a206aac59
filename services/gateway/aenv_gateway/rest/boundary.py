"""The control plane's one boundary (Starlette's way: handlers installed once, around the
router): every request is authenticated here as its route asks, and every typed error a route
raises is answered here as JSON with the status the HTTP table gives it. Routes neither check
keys nor map errors; a route that needs its caller reads `current_caller()`."""

from __future__ import annotations

import logging
from enum import Enum

from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Message, Receive, Scope, Send

from aenv_common.errors import AenvError
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.rest.errors import error_response, typed_error_response

log = logging.getLogger(__name__)


class Access(Enum):
    """Who may call a route."""

    KEY = "key"  # any valid API key: every route unless it says otherwise
    ADMIN = "admin"  # the configured key only (it manages the others)
    OPEN = "open"  # no key asked: public, or the route checks a credential of its own


def route(path: str, endpoint: object, method: str, access: Access = Access.KEY) -> Route:
    """A control-plane route and who may call it."""
    made = Route(path, endpoint, methods=[method])  # type: ignore[arg-type]
    return with_access(made, access)


def with_access(made: Route, access: Access) -> Route:
    made.access = access  # type: ignore[attr-defined]
    return made


def access_of(matched: BaseRoute) -> Access:
    return getattr(matched, "access", Access.KEY)


class ControlBoundary:
    """The ASGI app around the control-plane router."""

    def __init__(self, router: Router, auth: ApiKeyAuth) -> None:
        self._router = router
        self._auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._router(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            self._authenticate(scope)
            await self._router(scope, receive, watched)
        except AenvError as err:
            if started:  # a stream already answering ends here; its status is sent
                raise
            await typed_error_response(err)(scope, receive, send)
        except Exception:
            if started:
                raise
            log.exception("unhandled error",
                          extra={"method": scope.get("method"), "path": scope["path"]})
            await error_response(500, "internal error")(scope, receive, send)

    def _authenticate(self, scope: Scope) -> None:
        """:raise Unauthenticated: the route asks for a key the request lacks.
        :raise PermissionDenied: the route is the admin key's, and this is another."""
        access = next((access_of(r) for r in self._router.routes
                       if r.matches(scope)[0] is Match.FULL), Access.OPEN)
        presented = Headers(scope=scope).get("x-api-key")
        if access is Access.KEY:
            self._auth.check(presented)
        elif access is Access.ADMIN:
            self._auth.check_admin(presented)
