"""Where the gateway reads events and certificates: etcd in production (`EtcdEventStore`, over
aenv_common.events.EventLog), memory in tests and a gateway on its own (memory.py).

Every event read for a stream carries the etcd revision it was committed at: a subscriber that
resumes after an event it saw reads what was committed after that event's revision, whatever the
events' ids say (ids are stamped by their writers' clocks and may commit out of id order).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import NamedTuple, Protocol

import aetcd.exceptions
import grpc
from aetcd import rpc

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common import errors
from aenv_common.cluster.codec import decode
from aenv_common.cluster.store import etcd_errors
from aenv_common.events import EventLog
from aenv_common.events.log import EVENTS
from aenv_common.events.names import new_event_id

log = logging.getLogger(__name__)


class Recorded(NamedTuple):
    """An event and the etcd revision that committed it."""

    revision: int
    event: c.SandboxEvent


class Replay(NamedTuple):
    """The events committed after one event (in commit order), and the revision read at."""

    events: list[Recorded]
    revision: int


class EventStore(Protocol):
    async def death(self, sandbox_id: str) -> c.DeathCertificate | None:
        """:raise Unavailable: the store did not answer."""
        ...

    async def events(self, kind: str, scope: str = "") -> list[c.SandboxEvent]:
        """One index's retained events, oldest first (EventLog.events)."""
        ...

    async def revision(self) -> int:
        """The store's current revision."""
        ...

    async def after(self, event_id: str) -> Replay:
        """:raise OutOfRange: `event_id` is not retained (aged out, or never was)."""
        ...

    def watch(self, start_revision: int) -> AsyncIterator[Recorded]:
        """Every event committed from `start_revision` on, in commit order, until it fails
        (raises) or is closed."""
        ...


def expired(event_id: str) -> errors.OutOfRange:
    return errors.OutOfRange(
        f"event {event_id!r} is not retained (older than the retention, or unknown): "
        "list the events to start again")


def check_event_id(event_id: str) -> None:
    """:raise InvalidArgument: not an event id's shape (20 digits, "-", 8 hex digits)."""
    stamp, _, tail = event_id.partition("-")
    if len(event_id) != len(new_event_id(0)) or not stamp.isdigit() or len(tail) != 8 or any(
            ch not in "0123456789abcdef" for ch in tail):
        raise errors.InvalidArgument(f"{event_id!r} is not an event id")


class EtcdEventStore:
    """Reads `events/` (and the indexes) of an EventLog. A replay asks etcd for the keys with a
    mod revision past the resumed event's, so it is one range read however long the retention."""

    def __init__(self, log_: EventLog) -> None:
        self._log = log_

    async def death(self, sandbox_id: str) -> c.DeathCertificate | None:
        return await self._log.death(sandbox_id)

    async def events(self, kind: str, scope: str = "") -> list[c.SandboxEvent]:
        return await self._log.events(kind, scope)

    async def revision(self) -> int:
        prefix = self._log.prefix(EVENTS)
        response = await self._range(prefix, b"", keys_only=True)  # no such key: a header
        return int(response.header.revision)

    async def after(self, event_id: str) -> Replay:
        check_event_id(event_id)
        key = self._log.prefix(EVENTS) + event_id.encode()
        seen = await self._range(key, b"", keys_only=True)
        if not seen.kvs:
            raise expired(event_id)
        prefix = self._log.prefix(EVENTS)
        response = await self._range(prefix, _prefix_end(prefix),
                                     min_mod_revision=seen.kvs[0].mod_revision + 1)
        replay = sorted((Recorded(kv.mod_revision, decode(c.SandboxEvent, kv.value))
                         for kv in response.kvs), key=lambda r: r.revision)
        return Replay(replay, int(response.header.revision))

    async def watch(self, start_revision: int) -> AsyncGenerator[Recorded, None]:
        client = self._log.store.client
        with etcd_errors("watch events"):
            watch = await client.watch_prefix(self._log.prefix(EVENTS),
                                              start_revision=start_revision)
            try:
                async for change in watch:
                    if change.kind == "DELETE":  # aged out of the retention
                        continue
                    kv = change.kv
                    yield Recorded(kv.mod_revision, decode(c.SandboxEvent, kv.value))
            finally:
                await watch.cancel()
        raise errors.Unavailable("the watch on events ended")

    async def _range(
        self, key: bytes, range_end: bytes, *, limit: int = 0, keys_only: bool = False,
        min_mod_revision: int = 0,
    ) -> rpc.RangeResponse:
        """A Range call with what aetcd's own does not pass (min_mod_revision)."""
        client = self._log.store.client
        request = rpc.RangeRequest(key=key, range_end=range_end, limit=limit, keys_only=keys_only,
                                   min_mod_revision=min_mod_revision)
        with etcd_errors("read events"):
            await client.connect()
            try:
                response: rpc.RangeResponse = await client.kvstub.Range(
                    request, timeout=client._timeout, metadata=client.metadata)
            except grpc.aio.AioRpcError as err:
                if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise aetcd.exceptions.ConnectionFailedError(str(err)) from err
                raise aetcd.exceptions.ClientError(str(err)) from err
        return response


def _prefix_end(prefix: bytes) -> bytes:
    """The first key past every key starting with `prefix` (its last byte + 1)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])
