"""E2B's volume content API (`/volumecontent/{volumeID}/…`, the SDK's `Volume` file calls),
proxied to snapstore's VolumeService content calls.

Authenticated as E2B's: `Authorization: Bearer <the volume's token>` (from `POST /volumes` or
`GET /volumes/{id}`); the owner's API key (`X-API-Key`) also works. No credentials, or a token
that is not the volume's, is 401; an unknown volume (or another key's, by API key) is 404
"Volume not found". Bodies stream both ways, never whole in memory: a download is snapstore's
1 MiB messages as they come, an upload the request body's chunks as they arrive (the edge does
not bound this body: edge_limits.py). Snapstore's errors keep their statuses (404 no such path,
409 exists, 400 bad path or not a directory), except the quota: 507 Insufficient Storage, which
no client retries (a 429 would be).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import AenvError, InvalidArgument, ResourceExhausted, Unauthenticated
from aenv_gateway.core.volumes.operations import Volumes, not_found
from aenv_gateway.core.volumes.records import VolumeRecord
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.rest.errors import error_response, typed_error_response
from aenv_gateway.rest.schemas import parse_json_object

# The most one gRPC message of an upload carries (snapstore's WriteFile bound).
MAX_MESSAGE = 1 << 20

_TYPES = {
    pb.VOLUME_ENTRY_TYPE_FILE: "file",
    pb.VOLUME_ENTRY_TYPE_DIRECTORY: "directory",
    pb.VOLUME_ENTRY_TYPE_SYMLINK: "symlink",
}


def content_error(err: AenvError) -> Response:
    if isinstance(err, ResourceExhausted):
        return error_response(507, err.message, no_retry=True)
    return typed_error_response(err)


def _time(ns: int) -> str:
    moment = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    return moment.isoformat().replace("+00:00", "Z")


def present_entry(entry: pb.VolumeEntry) -> dict[str, Any]:
    """E2B's VolumeEntryStat."""
    body: dict[str, Any] = {
        "name": entry.name, "type": _TYPES.get(entry.type, "unknown"), "path": entry.path,
        "size": entry.size, "mode": entry.mode, "uid": entry.uid, "gid": entry.gid,
        "atime": _time(entry.atime_ns), "mtime": _time(entry.mtime_ns),
        "ctime": _time(entry.ctime_ns),
    }
    if entry.type == pb.VOLUME_ENTRY_TYPE_SYMLINK:
        body["target"] = entry.target
    return body


def _path(params: Mapping[str, str]) -> str:
    path = params.get("path")
    if not path:
        raise InvalidArgument("path is required")
    if not path.startswith("/"):
        raise InvalidArgument("Path must be absolute")
    return path


def _uint(params: Mapping[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name} must be a non-negative integer") from None
    if isinstance(value, bool) or not 0 <= number < 2**32:
        raise InvalidArgument(f"{name} must be a non-negative integer")
    return number


def _flag(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0", ""):
        raise InvalidArgument(f"{name} must be true or false")
    return value in ("true", "1")


class VolumeContent:
    def __init__(self, volumes: Volumes, auth: ApiKeyAuth) -> None:
        self._volumes = volumes
        self._auth = auth

    async def _volume(self, request: Request) -> VolumeRecord:
        """The volume the request may use. :raise Unauthenticated: no or a wrong token.
        :raise NotFound: no such volume (or another key's)."""
        volume_id = request.path_params["volumeID"]
        authorization = request.headers.get("authorization")
        api_key = request.headers.get("x-api-key")
        if authorization is None and api_key is None:
            raise Unauthenticated("Missing volume token (Authorization: Bearer <token>)")
        record = await self._volumes.record(volume_id)
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("Invalid volume token")
            if record is None:
                raise not_found()
            if hmac.compare_digest(token.strip().encode(), record.token.encode()):
                return record
            if self._auth.identify(token.strip()) != record.owner_key_id:
                raise Unauthenticated("Invalid volume token")
            return record
        owner = self._auth.check(api_key)
        if record is None or record.owner_key_id != owner:
            raise not_found()
        return record

    async def list_dir(self, request: Request) -> Response:
        record = await self._volume(request)
        params = request.query_params
        depth = _uint(params, "depth")
        entries = await self._volumes.client.list_dir(record.volume_id, _path(params), depth or 1)
        return JSONResponse([present_entry(e) for e in entries])

    async def make_dir(self, request: Request) -> Response:
        record = await self._volume(request)
        params = request.query_params
        entry = await self._volumes.client.make_dir(pb.MakeDirRequest(
            volume_id=record.volume_id, path=_path(params), uid=_uint(params, "uid"),
            gid=_uint(params, "gid"), mode=_uint(params, "mode"), force=_flag(params, "force")))
        return JSONResponse(present_entry(entry), status_code=201)

    async def stat(self, request: Request) -> Response:
        record = await self._volume(request)
        entry = await self._volumes.client.stat(record.volume_id, _path(request.query_params))
        return JSONResponse(present_entry(entry))

    async def update_metadata(self, request: Request) -> Response:
        record = await self._volume(request)
        body = parse_json_object(await request.body())
        entry = await self._volumes.client.update_metadata(pb.UpdateMetadataRequest(
            volume_id=record.volume_id, path=_path(request.query_params),
            uid=_uint(body, "uid"), gid=_uint(body, "gid"), mode=_uint(body, "mode")))
        return JSONResponse(present_entry(entry))

    async def remove(self, request: Request) -> Response:
        record = await self._volume(request)
        await self._volumes.client.remove(record.volume_id, _path(request.query_params))
        return Response(status_code=204)

    async def read_file(self, request: Request) -> Response:
        record = await self._volume(request)
        path = _path(request.query_params)
        client = self._volumes.client
        entry = await client.stat(record.volume_id, path)
        if entry.type == pb.VOLUME_ENTRY_TYPE_DIRECTORY:
            raise InvalidArgument(f"Path {path} is a directory")
        chunks = client.read(record.volume_id, path)
        # The first message before the answer's status: a failure is still an error response.
        first = await anext(chunks, b"")

        async def body() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for chunk in chunks:
                    yield chunk
            finally:
                await chunks.aclose()

        return StreamingResponse(body(), media_type="application/octet-stream")

    async def write_file(self, request: Request) -> Response:
        record = await self._volume(request)
        params = request.query_params
        header = pb.WriteFileHeader(
            volume_id=record.volume_id, path=_path(params), uid=_uint(params, "uid"),
            gid=_uint(params, "gid"), mode=_uint(params, "mode"), force=_flag(params, "force"))
        entry = await self._volumes.client.write(header, _bounded(request.stream()))
        return JSONResponse(present_entry(entry), status_code=201)


async def _bounded(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The body's chunks, none over one message's bound."""
    async for chunk in chunks:
        for start in range(0, len(chunk), MAX_MESSAGE):
            yield chunk[start:start + MAX_MESSAGE]


def parse_new_volume(raw: bytes) -> tuple[str, int]:
    """NewVolume `{name}` and the extension `quotaBytes` (0: snapstore's default)."""
    body = parse_json_object(raw)
    name = body.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("name is required and must be a string")
    quota = body.get("quotaBytes", 0)
    if isinstance(quota, bool) or not isinstance(quota, int) or not 0 <= quota < 2**63:
        raise InvalidArgument("quotaBytes must be a non-negative integer")
    return name, quota
