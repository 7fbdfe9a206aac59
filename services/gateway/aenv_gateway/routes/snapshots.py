"""Snapshot routes: listing. Deleting one goes through the template API's
`DELETE /templates/{id}` (routes/templates.py): E2B names snapshots as templates."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_gateway.auth import ApiKeyAuth
from aenv_gateway.routes.sandboxes import authenticated
from aenv_gateway.schemas import parse_snapshot_query, present_snapshot
from aenv_gateway.snapshots import SnapshotService


class SnapshotRoutes:
    def __init__(self, snapshots: SnapshotService) -> None:
        self._snapshots = snapshots

    async def list_snapshots(self, request: Request) -> Response:
        page = self._snapshots.list(parse_snapshot_query(request.query_params))
        headers = {"X-Next-Token": page.next_cursor} if page.next_cursor else None
        return JSONResponse([present_snapshot(r) for r in page.items], headers=headers)

    def routes(self, auth: ApiKeyAuth) -> list[Route]:
        return [
            Route("/snapshots", authenticated(auth, self.list_snapshots), methods=["GET"]),
        ]
