"""Admin routes of API keys (`/admin/keys`): create (the key is in the answer, once), list,
revoke. Only the configured (admin) key may call them."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv.cluster.v1.cluster_pb2 import ApiKeyRecord
from aenv_common.errors import InvalidArgument, NotFound
from aenv_common.ids import new_api_key
from aenv_gateway.keys.auth import ADMIN_KEY_ID
from aenv_gateway.keys.records import ApiKeyRecords, key_digest
from aenv_gateway.rest.boundary import Access, route
from aenv_gateway.rest.schemas import json_field, parse_json_object, rfc3339

log = logging.getLogger(__name__)
MAX_NAME = 128


def present_key(record: ApiKeyRecord) -> dict[str, Any]:
    return {"keyID": record.key_id, "name": record.name, "admin": False,
            "createdAt": rfc3339(record.created_at)}


class KeyRoutes:
    def __init__(self, records: ApiKeyRecords) -> None:
        self._records = records

    async def create(self, request: Request) -> Response:
        name = json_field(parse_json_object(await request.body()), "name", str) or ""
        if len(name) > MAX_NAME:
            raise InvalidArgument(f"name must be at most {MAX_NAME} characters")
        key = new_api_key()
        created = Timestamp()
        created.GetCurrentTime()
        record = ApiKeyRecord(key_id=secrets.token_hex(8), name=name, sha256=key_digest(key),
                              created_at=created)
        await self._records.put(record)
        log.info("api key created", extra={"key_id": record.key_id})  # never the key
        return JSONResponse({**present_key(record), "key": key}, status_code=201)

    async def list_keys(self, request: Request) -> Response:
        stored = sorted(self._records.records(), key=lambda r: r.created_at.ToNanoseconds())
        admin = {"keyID": ADMIN_KEY_ID, "name": "the configured key", "admin": True}
        return JSONResponse([admin, *(present_key(r) for r in stored)])

    async def revoke(self, request: Request) -> Response:
        key_id = request.path_params["key_id"]
        if key_id == ADMIN_KEY_ID:
            raise InvalidArgument("the configured key is changed in its file, not revoked here")
        if not any(r.key_id == key_id for r in self._records.records()):
            raise NotFound(f"api key '{key_id}' not found")
        await self._records.delete(key_id)
        log.info("api key revoked", extra={"key_id": key_id})
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        return [
            route("/admin/keys", self.create, "POST", Access.ADMIN),
            route("/admin/keys", self.list_keys, "GET", Access.ADMIN),
            route("/admin/keys/{key_id}", self.revoke, "DELETE", Access.ADMIN),
        ]
