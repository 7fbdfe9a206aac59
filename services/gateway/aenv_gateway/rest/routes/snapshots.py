"""Snapshot routes, named as E2B names them (snapshots.py): taking one and listing them.
Deleting one goes through the template API's `DELETE /templates/{id}` (rest/routes/templates.py):
E2B names snapshots as templates."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_common.errors import InvalidArgument
from aenv_gateway.core.snapshots import SnapshotService
from aenv_gateway.core.templates.snapshot_catalog import SnapshotInfo
from aenv_gateway.rest.boundary import route
from aenv_gateway.rest.schemas import parse_json_object, parse_memory, parse_snapshot_query


def present_snapshot(info: SnapshotInfo) -> dict[str, Any]:
    """SnapshotInfo (spec §2.2)."""
    return {"snapshotID": info.snapshot_id, "names": info.names}


class SnapshotRoutes:
    def __init__(self, snapshots: SnapshotService) -> None:
        self._snapshots = snapshots

    async def create_snapshot(self, request: Request) -> Response:
        body = parse_json_object(await request.body())
        name = body.get("name")
        if name is not None and not isinstance(name, str):
            raise InvalidArgument("name must be a string")
        info = await self._snapshots.create_named(
            request.path_params["sandbox_id"], name, parse_memory(body))
        return JSONResponse(present_snapshot(info), status_code=201)

    async def list_snapshots(self, request: Request) -> Response:
        page = self._snapshots.list_named(parse_snapshot_query(request.query_params))
        headers = {"X-Next-Token": page.next_cursor} if page.next_cursor else None
        return JSONResponse([present_snapshot(i) for i in page.items], headers=headers)

    def routes(self) -> list[Route]:
        return [
            route("/sandboxes/{sandbox_id}/snapshots", self.create_snapshot, "POST"),
            route("/snapshots", self.list_snapshots, "GET"),
        ]
