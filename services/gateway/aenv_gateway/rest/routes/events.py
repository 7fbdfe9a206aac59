"""The events routes: E2B's lifecycle events API (`GET /events/sandboxes[/{sandbox_id}]`, its
query and JSON exactly) and aenv's SSE stream (`GET /events/sandboxes/stream`); and the wrapper
that makes every route naming a {sandbox_id} answer a dead sandbox's 404 with its certificate."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from aenv_common.errors import AenvError, InvalidArgument, NotFound
from aenv_common.status_tables import http_status
from aenv_gateway.core.events.deaths import Deaths
from aenv_gateway.core.events.reader import EventFilter, EventPage, EventReader, checked_page
from aenv_gateway.core.events.stream import EventHub, Subscription
from aenv_gateway.core.events.wire import e2b_event, e2b_names, native_event, native_types
from aenv_gateway.keys.auth import current_caller
from aenv_gateway.rest.boundary import access_of, route, with_access
from aenv_gateway.rest.errors import Endpoint
from aenv_gateway.rest.query import optional_int
from aenv_gateway.rest.schemas import parse_metadata_filter

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventRoutes:
    def __init__(self, reader: EventReader, hub: EventHub,
                 heartbeat_s: float) -> None:
        self._reader = reader
        self._hub = hub
        self._heartbeat_s = heartbeat_s

    def routes(self) -> list[BaseRoute]:
        # The stream before {sandbox_id}, which would take "stream" for an id.
        return [route(path, endpoint, "GET") for path, endpoint
                in (("/events/sandboxes", self.list_all),
                    ("/events/sandboxes/stream", self.stream),
                    ("/events/sandboxes/{sandbox_id}", self.list_one))]

    async def list_all(self, request: Request) -> Response:
        return await self._list(request, "")

    async def list_one(self, request: Request) -> Response:
        return await self._list(request, request.path_params["sandbox_id"])

    async def _list(self, request: Request, sandbox_id: str) -> Response:
        params = request.query_params
        wanted = EventFilter(current_caller(), sandbox_id=sandbox_id,
                             e2b_names=e2b_names(params.getlist("types")))
        events = await self._reader.list(wanted, _e2b_page(params))
        return JSONResponse([e2b_event(e) for e in events])

    async def stream(self, request: Request) -> Response:
        """SSE: `id:` on every event (its event id), a comment every heartbeat, `event: error`
        before the end when the subscriber fell behind or the stream broke. Resume with the
        `Last-Event-ID` header (EventSource sends it) or `?after=`."""
        params = request.query_params
        wanted = EventFilter(
            current_caller(), sandbox_id=params.get("sandboxID", ""),
            types=native_types(params.getlist("types")),
            metadata=parse_metadata_filter(params.get("metadata")),
            lease_id=params.get("leaseID", ""))
        after = request.headers.get("last-event-id") or params.get("after", "")
        # Subscribed here, so a stale or malformed id is a JSON error before the stream starts.
        stack = contextlib.AsyncExitStack()
        subscriber = await stack.enter_async_context(self._hub.subscribe(wanted, after))
        return StreamingResponse(self._sse(subscriber, stack), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    async def _sse(
        self, subscriber: Subscription, stack: contextlib.AsyncExitStack
    ) -> AsyncIterator[bytes]:
        async with stack:
            yield b": connected\n\n"
            while True:
                try:
                    event = await subscriber.next(self._heartbeat_s)
                except AenvError as err:
                    body = json.dumps({"code": http_status(err), "message": err.message})
                    yield f"event: error\ndata: {body}\n\n".encode()
                    return
                if event is None:
                    yield b": keep-alive\n\n"
                    continue
                yield (f"id: {event.event_id}\n"
                       f"data: {json.dumps(native_event(event))}\n\n").encode()


def _e2b_page(params: Mapping[str, str]) -> EventPage:
    order = params.get("orderAsc", "false").lower()
    if order not in ("true", "false"):
        raise InvalidArgument("orderAsc must be true or false")
    offset = optional_int(params, "offset") or 0
    return checked_page(offset, optional_int(params, "limit"), order == "true")



def with_deaths(routes: list[BaseRoute], deaths: Deaths) -> list[BaseRoute]:
    """Every route whose path names a {sandbox_id}, answering a 404 for a dead sandbox with its
    certificate (Deaths.explain) instead; the others as they are."""
    return [_explained(r, deaths) if isinstance(r, Route) and "{sandbox_id" in r.path else r
            for r in routes]


def _explained(named: Route, deaths: Deaths) -> Route:
    inner: Endpoint = named.endpoint

    async def endpoint(request: Request) -> Response:
        try:
            return await inner(request)
        except NotFound as err:
            sandbox_id = str(request.path_params.get("sandbox_id", ""))
            raise await deaths.explain(sandbox_id, err) from err

    made = Route(named.path, endpoint, methods=named.methods, name=named.name)
    return with_access(made, access_of(named))
