"""Listing events: which a caller may see and which of those a query asks for.

A key sees the events of the sandboxes it created (the `key-events/<key id>` index); the
configured admin key sees every sandbox's (`events/`). One sandbox's events are read from its own
index (`sandbox-events/<id>`) and still shown only to its owner (or the admin).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import InvalidArgument
from aenv_common.events import TYPE_NAMES, e2b_event_type
from aenv_common.events.log import EVENTS, KEY_EVENTS, NO_KEY, SANDBOX_EVENTS
from aenv_gateway.core.events.store import EventStore
from aenv_gateway.keys.auth import ADMIN_KEY_ID

DEFAULT_LIMIT = 10  # E2B's
MAX_LIMIT = 100
MAX_OFFSET = 2**31 - 1  # E2B's int32


@dataclass(frozen=True)
class EventFilter:
    """What one caller asks to see: empty fields match everything."""

    caller: str
    sandbox_id: str = ""
    types: frozenset[int] = frozenset()
    metadata: Mapping[str, str] = field(default_factory=dict)
    lease_id: str = ""
    # E2B's routes: only events of these E2B names (empty: any event, named by E2B or not).
    e2b_names: frozenset[str] = frozenset()

    def admits(self, event: c.SandboxEvent) -> bool:
        return (
            (self.caller == ADMIN_KEY_ID or (event.owner_key_id or NO_KEY) == self.caller)
            and (not self.sandbox_id or event.sandbox_id == self.sandbox_id)
            and (not self.types or event.type in self.types)
            and (not self.e2b_names or e2b_event_type(event) in self.e2b_names)
            and (not self.lease_id or event.lease_id == self.lease_id)
            and all(event.metadata.get(k) == v for k, v in self.metadata.items())
        )


@dataclass(frozen=True)
class EventPage:
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    ascending: bool = False


def checked_types(types: list[int] | frozenset[int]) -> frozenset[int]:
    """:raise InvalidArgument: a type that is no event type (or UNSPECIFIED)."""
    unknown = [t for t in types if t not in TYPE_NAMES]
    if unknown:
        raise InvalidArgument(f"unknown event type {unknown[0]}")
    return frozenset(types)


def checked_page(offset: int, limit: int | None, ascending: bool) -> EventPage:
    """`limit` None: E2B's default. :raise InvalidArgument: out of range."""
    if limit is None:
        limit = DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT}")
    if not 0 <= offset <= MAX_OFFSET:
        raise InvalidArgument(f"offset must be between 0 and {MAX_OFFSET}")
    return EventPage(offset, limit, ascending)


class EventReader:
    def __init__(self, store: EventStore) -> None:
        self._store = store

    async def list(self, wanted: EventFilter, page: EventPage) -> list[c.SandboxEvent]:
        """One page of the retained events `wanted` admits, newest first unless ascending.

        :raise Unavailable: the store did not answer.
        """
        if wanted.sandbox_id:
            retained = await self._store.events(SANDBOX_EVENTS, wanted.sandbox_id)
        elif wanted.caller == ADMIN_KEY_ID:
            retained = await self._store.events(EVENTS)
        else:
            retained = await self._store.events(KEY_EVENTS, wanted.caller or NO_KEY)
        chosen = [e for e in retained if wanted.admits(e)]
        # Ids sort by the time their writer stamped: the order the changes were made in.
        chosen.sort(key=lambda e: e.event_id, reverse=not page.ascending)
        return chosen[page.offset:page.offset + page.limit]
