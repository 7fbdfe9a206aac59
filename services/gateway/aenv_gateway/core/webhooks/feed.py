"""The events one webhook is sent, in commit order, from where it left off.

A webhook of a key follows that key's sandboxes' events (`key-events/<key id>/`); one of the
configured admin key follows every sandbox's (`events/`), as the admin key sees them all on the
events API. Its position is the etcd revision that committed the last event it handled and that
event's id (one transaction may commit several events): it follows an etcd watch opened at that
revision, which first replays what was committed since and then goes on live. Commit order, not
id order, is what counts: ids are stamped by their writers' clocks, and an event stamped earlier
may commit later.

Where the watch cannot start (the revision was compacted away) or the cursor's event aged out,
the retained events of the scope are read once instead, filtered by position, and the watch
opens after that read.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import aetcd.exceptions

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster.codec import decode
from aenv_common.cluster.store import etcd_errors
from aenv_common.errors import Unavailable
from aenv_common.events import EventLog
from aenv_common.events.log import EVENTS, KEY_EVENTS, NO_KEY
from aenv_gateway.core.webhooks.registry import REVISION_CURSOR
from aenv_gateway.keys.auth import ADMIN_KEY_ID

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Position:
    """Where a webhook is: past `revision` (and, within it, past `event_id`). A negative
    revision: only the id is known (its event aged out), so ids decide."""

    revision: int
    event_id: str = ""

    def precedes(self, revision: int, event_id: str) -> bool:
        """Whether the event committed at `revision` with `event_id` comes after this."""
        if self.revision < 0:
            return event_id > self.event_id
        return revision > self.revision or (
            revision == self.revision and bool(self.event_id) and event_id > self.event_id)


def scope_of(owner_key_id: str) -> str:
    """Whose events a webhook of `owner_key_id` is sent (see the module's doc)."""
    return "" if owner_key_id == ADMIN_KEY_ID else owner_key_id or NO_KEY


class EventFeed(Protocol):
    async def position(self, scope: str, cursor: str, created_revision: int) -> Position:
        """Where a webhook whose record holds `cursor` (created at `created_revision`) is."""
        ...

    def follow(self, scope: str, after: Position) -> AsyncIterator[tuple[int, c.SandboxEvent]]:
        """(revision, event) of every event of `scope` after `after`, in commit order, then
        live, until it fails (raises Unavailable) or is closed."""
        ...


class EtcdEventFeed:
    def __init__(self, events: EventLog) -> None:
        self._events = events

    def _prefix(self, scope: str) -> bytes:
        return self._events.prefix(KEY_EVENTS, scope) if scope else self._events.prefix(EVENTS)

    async def position(self, scope: str, cursor: str, created_revision: int) -> Position:
        if not cursor:
            return Position(created_revision)
        if cursor.startswith(REVISION_CURSOR):
            return Position(int(cursor[len(REVISION_CURSOR):]))
        with etcd_errors("read a webhook's cursor event"):
            kv = await self._events.store.client.get(self._prefix(scope) + cursor.encode())
        return Position(-1, cursor) if kv is None else Position(kv.mod_revision, cursor)

    async def follow(
        self, scope: str, after: Position
    ) -> AsyncIterator[tuple[int, c.SandboxEvent]]:
        last, start = after, after.revision
        while True:
            if start < 0:
                retained, read_at = await self._retained(scope, last)
                for revision, event in retained:
                    yield revision, event
                # Everything committed up to the read is decided: the watch goes on after it.
                last, start = Position(read_at), read_at + 1
            try:
                async for revision, event in self._watch(scope, last, start):
                    last = Position(revision, event.event_id)
                    yield revision, event
            except _Compacted:
                log.warning("a webhook's revision was compacted; reading the retained events",
                            extra={"revision": start})
                start = -1
                continue
            raise Unavailable("the watch on a webhook's events ended")

    async def _watch(
        self, scope: str, after: Position, start: int
    ) -> AsyncIterator[tuple[int, c.SandboxEvent]]:
        client = self._events.store.client
        with etcd_errors("watch a webhook's events"):
            try:
                watch = await client.watch_prefix(self._prefix(scope), start_revision=max(start, 1))
            except aetcd.exceptions.RevisionCompactedError:
                raise _Compacted from None
            try:
                async for change in watch:
                    kv = change.kv
                    if change.kind == "DELETE" or not after.precedes(
                            kv.mod_revision, _event_id(kv.key)):
                        continue  # aged out, or handled already
                    yield kv.mod_revision, decode(c.SandboxEvent, kv.value)
            except aetcd.exceptions.RevisionCompactedError:
                raise _Compacted from None
            finally:
                await watch.cancel()

    async def _retained(
        self, scope: str, after: Position
    ) -> tuple[list[tuple[int, c.SandboxEvent]], int]:
        """The retained events of `scope` after `after`, in commit order, and the revision read
        at (the watch goes on after it)."""
        with etcd_errors("read a webhook's events"):
            result = await self._events.store.client.get_prefix(self._prefix(scope))
        found = sorted((kv.mod_revision, _event_id(kv.key), kv.value) for kv in result.kvs
                       if after.precedes(kv.mod_revision, _event_id(kv.key)))
        events = [(revision, decode(c.SandboxEvent, value)) for revision, _, value in found]
        return events, int(result.header.revision)


def _event_id(key: bytes) -> str:
    return key.rsplit(b"/", 1)[-1].decode()


class _Compacted(Exception):
    """The watch's start revision is no longer kept by etcd."""
