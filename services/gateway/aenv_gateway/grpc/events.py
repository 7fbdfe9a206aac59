"""The native API's events (gRPC ListSandboxEvents / WatchSandboxEvents): requests checked and
turned into a filter, then read (reader.py) or followed (stream.py). The servicer only
authenticates and delegates here."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aenv.gateway.v1 import gateway_pb2
from aenv_gateway.core.events.reader import EventFilter, EventReader, checked_page, checked_types
from aenv_gateway.core.events.stream import EventHub


class SandboxEvents:
    def __init__(self, reader: EventReader, hub: EventHub) -> None:
        self.reader = reader
        self.hub = hub

    async def list(
        self, caller: str, request: gateway_pb2.ListSandboxEventsRequest
    ) -> gateway_pb2.ListSandboxEventsResponse:
        """:raise InvalidArgument: a limit out of range, an unknown type."""
        wanted = EventFilter(caller, sandbox_id=request.sandbox_id,
                             types=checked_types(list(request.types)),
                             metadata=dict(request.metadata))
        page = checked_page(request.offset, request.limit or None, request.order_ascending)
        return gateway_pb2.ListSandboxEventsResponse(events=await self.reader.list(wanted, page))

    async def watch(
        self, caller: str, request: gateway_pb2.WatchSandboxEventsRequest
    ) -> AsyncIterator[gateway_pb2.WatchSandboxEventsResponse]:
        """:raise OutOfRange: `after_event_id` is no longer retained.
        :raise ResourceExhausted: the client fell behind (resume after its last event id)."""
        wanted = EventFilter(caller, sandbox_id=request.sandbox_id,
                             types=checked_types(list(request.types)),
                             metadata=dict(request.metadata), lease_id=request.lease_id)
        async for event in self.hub.events(wanted, request.after_event_id):
            yield gateway_pb2.WatchSandboxEventsResponse(event=event)
