"""E2B's lifecycle webhook routes (its events API, `/events/webhooks`): register (201, E2B's
WebhookCreation), list, get (WebhookDetail), update (PATCH: the fields given, 200 with the
result) and delete (200, no body) of `/events/webhooks/{webhookID}`; and aenv's own
`GET /events/webhooks/{webhookID}/deliveries`, the delivery log (newest first, `limit`).

The signature secret is write-only: no answer carries it, and no error quotes a request body.
An answer names the owner both as E2B's OpenAPI document does (`teamId`) and as its docs'
example does (`teamID`), so a client written after either finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.errors import InvalidArgument
from aenv_gateway.core.webhooks.registry import WebhookChanges, WebhookRegistry, WebhookSpec
from aenv_gateway.keys.auth import current_caller
from aenv_gateway.rest.boundary import route
from aenv_gateway.rest.json_fields import json_field, json_strings
from aenv_gateway.rest.schemas import parse_json_object, rfc3339

DEFAULT_DELIVERIES = 100
MAX_DELIVERIES = 1000


def present_webhook(record: WebhookRecord) -> dict[str, Any]:
    """E2B's WebhookDetail (its WebhookCreation holds the same fields)."""
    return {"id": record.webhook_id, "teamId": record.owner_key_id,
            "teamID": record.owner_key_id, "name": record.name,
            "createdAt": rfc3339(record.created_at), "url": record.url,
            "enabled": record.enabled, "events": list(record.events)}


def present_delivery(delivery: WebhookDelivery) -> dict[str, Any]:
    return {"eventId": delivery.event_id, "attempts": delivery.attempts,
            "lastStatus": delivery.last_status or None,
            "lastError": delivery.last_error or None,
            "firstAttemptAt": rfc3339(delivery.first_attempt_at),
            "lastAttemptAt": rfc3339(delivery.last_attempt_at),
            "delivered": delivery.delivered, "gaveUp": delivery.gave_up}


def _not_null(body: Mapping[str, Any], name: str) -> None:
    if name in body and body[name] is None:
        raise InvalidArgument(f"{name} must not be null")


def parse_spec(body: Mapping[str, Any]) -> WebhookSpec:
    """E2B's WebhookCreate: name, url, events and signatureSecret required; enabled true
    unless given."""
    _not_null(body, "enabled")
    name = json_field(body, "name", str, required=True)
    url = json_field(body, "url", str, required=True)
    secret = json_field(body, "signatureSecret", str, required=True)
    if "events" not in body or body["events"] is None:
        raise InvalidArgument("events is required")
    enabled = json_field(body, "enabled", bool)
    assert name is not None and url is not None and secret is not None  # required
    return WebhookSpec(name=name, url=url, events=json_strings(body, "events"),
                       signature_secret=secret, enabled=True if enabled is None else enabled)


def parse_changes(body: Mapping[str, Any]) -> WebhookChanges:
    """E2B's WebhookConfiguration: every field optional; null is refused (not "unset")."""
    for name in ("name", "url", "events", "signatureSecret", "enabled"):
        _not_null(body, name)
    return WebhookChanges(
        name=json_field(body, "name", str), url=json_field(body, "url", str),
        events=json_strings(body, "events") if "events" in body else None,
        signature_secret=json_field(body, "signatureSecret", str),
        enabled=json_field(body, "enabled", bool))


def parse_deliveries_limit(params: Mapping[str, str]) -> int:
    raw = params.get("limit")
    if raw is None:
        return DEFAULT_DELIVERIES
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidArgument("limit must be an integer") from None
    if not 1 <= limit <= MAX_DELIVERIES:
        raise InvalidArgument(f"limit must be between 1 and {MAX_DELIVERIES}")
    return limit


class WebhookRoutes:
    def __init__(self, registry: WebhookRegistry) -> None:
        self._registry = registry

    async def create(self, request: Request) -> Response:
        owner = current_caller()
        spec = parse_spec(parse_json_object(await request.body()))
        record = await self._registry.create(owner, spec)
        return JSONResponse(present_webhook(record), status_code=201)

    async def list_webhooks(self, request: Request) -> Response:
        owner = current_caller()
        return JSONResponse([present_webhook(r) for r in await self._registry.list(owner)])

    async def get(self, request: Request) -> Response:
        owner = current_caller()
        record = await self._registry.get(owner, request.path_params["webhookID"])
        return JSONResponse(present_webhook(record))

    async def update(self, request: Request) -> Response:
        owner = current_caller()
        changes = parse_changes(parse_json_object(await request.body()))
        record = await self._registry.update(owner, request.path_params["webhookID"], changes)
        return JSONResponse(present_webhook(record))

    async def delete(self, request: Request) -> Response:
        owner = current_caller()
        await self._registry.delete(owner, request.path_params["webhookID"])
        return Response(status_code=200)

    async def deliveries(self, request: Request) -> Response:
        owner = current_caller()
        limit = parse_deliveries_limit(request.query_params)
        logged = await self._registry.deliveries(owner, request.path_params["webhookID"], limit)
        return JSONResponse([present_delivery(d) for d in logged])

    def routes(self) -> list[Route]:
        one = "/events/webhooks/{webhookID}"
        return [
            route("/events/webhooks", self.create, "POST"),
            route("/events/webhooks", self.list_webhooks, "GET"),
            route(one, self.get, "GET"),
            route(one, self.update, "PATCH"),
            route(one, self.delete, "DELETE"),
            route(one + "/deliveries", self.deliveries, "GET"),
        ]
