"""Experiment leases and bulk operations on REST (aenv extensions; docs/leases.md):
`/leases` and `POST /sandboxes/kill`, `POST /sandboxes/pause`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_gateway.core.bulk import BulkOperations
from aenv_gateway.core.leases import Leases
from aenv_gateway.core.leases.operations import timestamp
from aenv_gateway.keys.auth import current_caller
from aenv_gateway.rest.boundary import route as keyed_route
from aenv_gateway.rest.errors import Endpoint
from aenv_gateway.rest.lease_wire import (
    parse_filter,
    parse_new_lease,
    present_lease,
    present_outcome,
)
from aenv_gateway.rest.schemas import parse_json_object, parse_memory, rfc3339

# An endpoint given the id of the key the request was checked with.
_CallerEndpoint = Callable[[Request, str], Awaitable[Response]]


class LeaseRoutes:
    def __init__(self, leases: Leases, bulk: BulkOperations) -> None:
        self._leases = leases
        self._bulk = bulk

    async def create(self, request: Request, caller: str) -> Response:
        ttl, action, name, metadata = parse_new_lease(parse_json_object(await request.body()))
        view = await self._leases.create(caller, ttl, action, name, metadata)
        return JSONResponse(present_lease(view), status_code=201)

    async def renew(self, request: Request, caller: str) -> Response:
        lease_id = request.path_params["leaseID"]
        expires_at = await self._leases.renew(caller, lease_id)
        return JSONResponse({"leaseID": lease_id, "expiresAt": rfc3339(timestamp(expires_at))})

    async def get(self, request: Request, caller: str) -> Response:
        view = await self._leases.get(caller, request.path_params["leaseID"])
        return JSONResponse(present_lease(view))

    async def listed(self, request: Request, caller: str) -> Response:
        return JSONResponse([present_lease(v) for v in await self._leases.list(caller)])

    async def release(self, request: Request, caller: str) -> Response:
        await self._leases.release(caller, request.path_params["leaseID"])
        return Response(status_code=204)

    async def kill_sandboxes(self, request: Request, caller: str) -> Response:
        sandbox_filter = parse_filter(parse_json_object(await request.body()))
        outcomes = await self._bulk.kill(caller, sandbox_filter)
        return JSONResponse([present_outcome(o) for o in outcomes])

    async def pause_sandboxes(self, request: Request, caller: str) -> Response:
        body = parse_json_object(await request.body())
        outcomes = await self._bulk.pause(caller, parse_filter(body),
                                          keep_memory=parse_memory(body))
        return JSONResponse([present_outcome(o) for o in outcomes])

    def routes(self) -> list[Route]:
        def route(path: str, endpoint: _CallerEndpoint, method: str) -> Route:
            return keyed_route(path, _with_caller(endpoint), method)

        return [
            route("/leases", self.create, "POST"),
            route("/leases", self.listed, "GET"),
            route("/leases/{leaseID}", self.get, "GET"),
            route("/leases/{leaseID}", self.release, "DELETE"),
            route("/leases/{leaseID}/renew", self.renew, "POST"),
            route("/sandboxes/kill", self.kill_sandboxes, "POST"),
            route("/sandboxes/pause", self.pause_sandboxes, "POST"),
        ]


def _with_caller(endpoint: _CallerEndpoint) -> Endpoint:
    async def called(request: Request) -> Response:
        return await endpoint(request, current_caller())

    return called
