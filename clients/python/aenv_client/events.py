"""Lifecycle events of the key's sandboxes (created, ready, paused, resumed, ..., died with a
cause): listed, or followed as they are recorded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_client.connection import Connection
from aenv_client.errors import rpc_error

# A stream the gateway broke off (it restarted) or cut (this client fell behind): resumed.
_RESUMED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


class EventCalls(Connection):
    async def list_events(
        self,
        *,
        sandbox_id: str = "",
        types: Sequence[cluster_pb2.SandboxEventType] = (),
        metadata: Mapping[str, str] | None = None,
        limit: int = 0,
        offset: int = 0,
        order_ascending: bool = False,
        timeout_s: float | None = None,
    ) -> list[cluster_pb2.SandboxEvent]:
        """One page of the retained events (newest first unless `order_ascending`; `limit`
        1..100, 0: 10): one sandbox's, or every sandbox's of this key."""
        request = gateway_pb2.ListSandboxEventsRequest(
            sandbox_id=sandbox_id, types=types, metadata=dict(metadata or {}), limit=limit,
            offset=offset, order_ascending=order_ascending)
        reply: gateway_pb2.ListSandboxEventsResponse = await self._call(
            self._stub.ListSandboxEvents, request, timeout_s, retry=True)
        return list(reply.events)

    async def watch_events(
        self,
        *,
        sandbox_id: str = "",
        types: Sequence[cluster_pb2.SandboxEventType] = (),
        metadata: Mapping[str, str] | None = None,
        lease_id: str = "",
        after_event_id: str = "",
        reconnects: int = 5,
    ) -> AsyncIterator[cluster_pb2.SandboxEvent]:
        """Follows the events as they are recorded (those after `after_event_id` first), until
        the caller stops iterating. A stream the gateway breaks off (a restart) or cuts (this
        client fell behind) is opened again after the last event received, up to `reconnects`
        times in a row: nothing still retained is missed, an event may come twice.

        :raise OutOfRange: `after_event_id` (or the last one received) is no longer retained.
        """
        last = after_event_id
        failures = 0
        while True:
            request = gateway_pb2.WatchSandboxEventsRequest(
                sandbox_id=sandbox_id, types=types, metadata=dict(metadata or {}),
                after_event_id=last, lease_id=lease_id)
            call = self._stub.WatchSandboxEvents(request, metadata=self._metadata)
            try:
                async for reply in call:
                    failures = 0
                    last = reply.event.event_id
                    yield reply.event
                return
            except grpc.aio.AioRpcError as err:
                if err.code() not in _RESUMED or failures >= reconnects:
                    raise rpc_error(err) from err
            finally:
                call.cancel()
            failures += 1
            await asyncio.sleep(min(0.2 * 2 ** failures, 5.0))
