"""Snapshot routes: snapshots live behind the template API (`DELETE /templates/{id}`)."""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_common.errors import NotFound
from aenv_gateway.auth import ApiKeyAuth
from aenv_gateway.routes.sandboxes import authenticated


def raw_template_id(request: Request) -> str:
    """The id is one percent-encoded path segment that may itself contain `/` and `:`
    (`team/snap:v1` -> `/templates/team%2Fsnap%3Av1`): decode it from the raw path."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    segment = raw.split(b"?", 1)[0].decode("latin-1").removeprefix("/templates/")
    return unquote(segment)


async def list_snapshots(_: Request) -> Response:
    # Snapshots cannot be created yet (POST .../snapshots answers 501), so there are none.
    return JSONResponse([])


async def delete_template(request: Request) -> Response:
    raise NotFound(f'template or snapshot "{raw_template_id(request)}" not found')


def routes(auth: ApiKeyAuth) -> list[Route]:
    return [
        Route("/snapshots", authenticated(auth, list_snapshots), methods=["GET"]),
        # `:path` so the decoded `/` inside the id still matches; the handler reads the raw path.
        Route(
            "/templates/{template_id:path}",
            authenticated(auth, delete_template),
            methods=["DELETE"],
        ),
    ]
