"""Snapshot routes: listing, and deletion behind the template API (`DELETE /templates/{id}`)."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_gateway.auth import ApiKeyAuth
from aenv_gateway.routes.sandboxes import authenticated
from aenv_gateway.schemas import parse_snapshot_query, present_snapshot
from aenv_gateway.snapshots import SnapshotService


def raw_template_id(request: Request) -> str:
    """The id is one percent-encoded path segment that may itself contain `/` and `:`
    (`team/snap:v1` -> `/templates/team%2Fsnap%3Av1`): decode it from the raw path."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    segment = raw.split(b"?", 1)[0].decode("latin-1").removeprefix("/templates/")
    return unquote(segment)


class SnapshotRoutes:
    def __init__(self, snapshots: SnapshotService) -> None:
        self._snapshots = snapshots

    async def list_snapshots(self, request: Request) -> Response:
        page = self._snapshots.list(parse_snapshot_query(request.query_params))
        headers = {"X-Next-Token": page.next_cursor} if page.next_cursor else None
        return JSONResponse([present_snapshot(r) for r in page.items], headers=headers)

    async def delete_snapshot(self, request: Request) -> Response:
        # Templates cannot be built through the API (yet): every deletable id is a snapshot's.
        await self._snapshots.delete(raw_template_id(request))
        return Response(status_code=204)

    def routes(self, auth: ApiKeyAuth) -> list[Route]:
        return [
            Route("/snapshots", authenticated(auth, self.list_snapshots), methods=["GET"]),
            # `:path` so the decoded `/` inside the id still matches; the handler reads the raw
            # path.
            Route(
                "/templates/{template_id:path}",
                authenticated(auth, self.delete_snapshot),
                methods=["DELETE"],
            ),
        ]
