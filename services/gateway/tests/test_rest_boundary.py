"""The REST control plane's one boundary: each route's access (a key by default, the admin key,
or open) checked before it runs, and what it raises answered as JSON with the HTTP table's
status, an unexpected failure as a JSON 500; routes themselves do neither."""

from __future__ import annotations

import asyncio

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from aenv_common.errors import Conflict
from aenv_gateway.keys.auth import ApiKeyAuth, current_caller
from aenv_gateway.rest.boundary import Access, ControlBoundary, route

ADMIN_KEY = "e2b_" + "a" * 40


async def _caller(request: Request) -> Response:
    return JSONResponse({"caller": current_caller()})


async def _conflict(request: Request) -> Response:
    raise Conflict("already paused")


async def _bug(request: Request) -> Response:
    raise RuntimeError("a bug")


async def _get(http: httpx.AsyncClient, path: str, **headers: str) -> httpx.Response:
    """A request in its own task, as a server runs each (so its caller stays its own)."""
    return await asyncio.create_task(http.get(path, headers=headers))


def _client() -> httpx.AsyncClient:
    router = Router(routes=[
        route("/keyed", _caller, "GET"),
        Route("/plain", _caller, methods=["GET"]),  # says nothing: a key, like every route
        route("/admin", _caller, "GET", Access.ADMIN),
        route("/open", _caller, "GET", Access.OPEN),
        route("/conflict", _conflict, "GET", Access.OPEN),
        route("/bug", _bug, "GET", Access.OPEN),
    ])
    app = ControlBoundary(router, ApiKeyAuth(ADMIN_KEY))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


async def test_each_route_is_authenticated_as_it_asks() -> None:
    async with _client() as http:
        for path in ("/keyed", "/plain", "/admin"):
            refused = await _get(http, path)
            assert refused.status_code == 401, path
            assert refused.json() == {"code": 401, "message": "Invalid API key"}
            assert (await _get(http, path, **{"X-API-Key": "e2b_wrong"})).status_code == 401
            answer = await _get(http, path, **{"X-API-Key": ADMIN_KEY})
            assert answer.json() == {"caller": "admin"}
        assert (await _get(http, "/open")).json() == {"caller": ""}


async def test_typed_errors_and_bugs_are_answered_as_json_at_the_boundary() -> None:
    async with _client() as http:
        conflict = await _get(http, "/conflict")
        assert (conflict.status_code, conflict.json()) == (
            409, {"code": 409, "message": "already paused"})
        bug = await _get(http, "/bug")
        assert (bug.status_code, bug.json()) == (500, {"code": 500, "message": "internal error"})
