"""E2B's volume routes: `/volumes` (the API key's volumes: create, list, get, delete) and the
content routes `/volumecontent/{volumeID}/{dir,path,file}` (volumes/content.py), which
authenticate by the volume's token instead of the API key."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv_common.errors import AenvError
from aenv_gateway.core.volumes.operations import Volumes
from aenv_gateway.core.volumes.records import VolumeRecord
from aenv_gateway.keys.auth import ApiKeyAuth, current_caller
from aenv_gateway.rest.boundary import Access, route
from aenv_gateway.rest.errors import Endpoint, error_response
from aenv_gateway.rest.volume_content import VolumeContent, content_error, parse_new_volume

log = logging.getLogger(__name__)


def _listed(record: VolumeRecord) -> dict[str, Any]:
    return {"volumeID": record.volume_id, "name": record.name}


def _with_token(record: VolumeRecord) -> dict[str, Any]:
    """VolumeAndToken (`domain` stays unset: content goes to this API's own host)."""
    return {**_listed(record), "token": record.token}


class VolumeRoutes:
    def __init__(self, volumes: Volumes, auth: ApiKeyAuth) -> None:
        self._volumes = volumes
        self._content = VolumeContent(volumes, auth)

    async def create(self, request: Request) -> Response:
        name, quota = parse_new_volume(await request.body())
        record = await self._volumes.create(current_caller(), name, quota)
        return JSONResponse(_with_token(record), status_code=201)

    async def list_volumes(self, request: Request) -> Response:
        owned = await self._volumes.owned(current_caller())
        return JSONResponse([_listed(r) for r in owned])

    async def get(self, request: Request) -> Response:
        record = await self._volumes.get(current_caller(), request.path_params["volumeID"])
        return JSONResponse(_with_token(record))

    async def delete(self, request: Request) -> Response:
        await self._volumes.destroy(current_caller(), request.path_params["volumeID"])
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        def control(path: str, endpoint: Endpoint, method: str) -> Route:
            return route(path, endpoint, method)

        def content(path: str, endpoint: Endpoint, method: str) -> Route:
            # The content API takes a volume's token too (VolumeContent checks either) and
            # answers its own error shape.
            return route(path, _content_errors(endpoint), method, Access.OPEN)

        vid = "/volumes/{volumeID}"
        vc = "/volumecontent/{volumeID}"
        c = self._content
        return [
            control("/volumes", self.create, "POST"),
            control("/volumes", self.list_volumes, "GET"),
            control(vid, self.get, "GET"),
            control(vid, self.delete, "DELETE"),
            content(f"{vc}/dir", c.list_dir, "GET"),
            content(f"{vc}/dir", c.make_dir, "POST"),
            content(f"{vc}/path", c.stat, "GET"),
            content(f"{vc}/path", c.update_metadata, "PATCH"),
            content(f"{vc}/path", c.remove, "DELETE"),
            content(f"{vc}/file", c.read_file, "GET"),
            content(f"{vc}/file", c.write_file, "PUT"),
        ]


def _content_errors(endpoint: Endpoint) -> Endpoint:
    """The content API's own error answers (content_error), in place of the boundary's."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except AenvError as err:
            return content_error(err)
        except Exception:
            log.exception("unhandled error", extra={"method": request.method,
                                                    "path": request.url.path})
            return error_response(500, "internal error")

    return wrapped
