"""E2B's Secret API routes (SDK 2.63 `Secret`, OpenAPI `secrets`): create (201), list (paged by
`limit` and `nextToken`, the next page's cursor in `X-Next-Token`), get, update (200) and delete
(204) of `/secrets/{secretID}`, where the segment is a secret's id (`sec_…`) or its name.

Values are write-only: no answer carries one, and no error quotes a request body (a refused
value is named by its field only)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.errors import InvalidArgument
from aenv_common.secrets.rules import check_metadata
from aenv_gateway.core.secrets import GatewaySecrets
from aenv_gateway.keys.auth import current_caller
from aenv_gateway.rest.boundary import route
from aenv_gateway.rest.json_fields import json_field
from aenv_gateway.rest.schemas import parse_json_object, parse_limit, rfc3339


def present_secret(record: SecretRecord) -> dict[str, Any]:
    """E2B's `Secret`: metadata only, never the value."""
    return {"secretID": record.secret_id, "name": record.name,
            "currentVersion": record.current_version, "metadata": dict(record.metadata),
            "createdAt": rfc3339(record.created_at), "updatedAt": rfc3339(record.updated_at)}


def _string(body: dict[str, Any], name: str) -> str:
    value = json_field(body, name, str, required=True)
    assert value is not None  # required: json_field raised otherwise
    return value


def _metadata(body: dict[str, Any]) -> dict[str, str] | None:
    """None when absent (an update then keeps the stored metadata); null is refused, as the
    OpenAPI document says (the SDKs omit it)."""
    if "metadata" in body and body["metadata"] is None:
        raise InvalidArgument("metadata must be an object")
    given = json_field(body, "metadata", dict)
    return None if given is None else check_metadata(given)


class SecretRoutes:
    def __init__(self, secrets: GatewaySecrets) -> None:
        self._secrets = secrets

    async def create(self, request: Request) -> Response:
        owner = current_caller()
        body = parse_json_object(await request.body())
        record = await self._secrets.create(
            owner, _string(body, "name"), _string(body, "value"), _metadata(body) or {})
        return JSONResponse(present_secret(record), status_code=201)

    async def list_secrets(self, request: Request) -> Response:
        owner = current_caller()
        limit = parse_limit(request.query_params)
        page, next_cursor = await self._secrets.page(
            owner, limit, request.query_params.get("nextToken") or None)
        headers = {"X-Next-Token": next_cursor} if next_cursor else None
        return JSONResponse([present_secret(r) for r in page], headers=headers)

    async def get(self, request: Request) -> Response:
        owner = current_caller()
        record = await self._secrets.get(owner, request.path_params["secretID"])
        return JSONResponse(present_secret(record))

    async def update(self, request: Request) -> Response:
        owner = current_caller()
        body = parse_json_object(await request.body())
        record = await self._secrets.update(
            owner, request.path_params["secretID"], _string(body, "value"), _metadata(body))
        return JSONResponse(present_secret(record))

    async def destroy(self, request: Request) -> Response:
        owner = current_caller()
        await self._secrets.destroy(owner, request.path_params["secretID"])
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        one = "/secrets/{secretID}"
        return [
            route("/secrets", self.create, "POST"),
            route("/secrets", self.list_secrets, "GET"),
            route(one, self.get, "GET"),
            route(one, self.update, "POST"),
            route(one, self.destroy, "DELETE"),
        ]
