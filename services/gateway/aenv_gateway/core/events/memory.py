"""An EventStore in memory, with etcd's semantics where the gateway relies on them (one revision
per write, a replay by revision, a watch from a revision): for tests, and a gateway run without
etcd, where nothing writes events but the tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common import errors
from aenv_common.events.log import EVENTS, KEY_EVENTS, NO_KEY, SANDBOX_EVENTS
from aenv_common.events.names import new_event_id
from aenv_gateway.core.events.store import Recorded, Replay, check_event_id, expired


class InMemoryEventStore:
    def __init__(self) -> None:
        self._log: list[Recorded] = []
        self._deaths: dict[str, c.DeathCertificate] = {}
        self._revision = 0
        self._changed = asyncio.Condition()
        # Set to make the next watch step fail (tests of the hub's recovery).
        self.fail_watch: errors.AenvError | None = None

    # Writing (what node agents and the scheduler do through EventLog) ---------------------

    async def record(self, *events: c.SandboxEvent) -> list[c.SandboxEvent]:
        """Commits the events at one new revision (stamped here when they have no id)."""
        self._revision += 1
        for event in events:
            if not event.event_id:
                event.event_id = new_event_id()
                event.time.GetCurrentTime()
            self._log.append(Recorded(self._revision, event))
        async with self._changed:
            self._changed.notify_all()
        return list(events)

    async def certify(self, certificate: c.DeathCertificate, event: c.SandboxEvent) -> None:
        await self.record(event)
        certificate.event_id = event.event_id
        self._deaths[certificate.sandbox_id] = certificate

    def forget(self, event_id: str) -> None:
        """Drops an event as the retention does."""
        self._log = [r for r in self._log if r.event.event_id != event_id]

    async def cut(self, error: errors.AenvError) -> None:
        """Makes every open watch fail with `error` (as etcd's does on a compaction)."""
        self.fail_watch = error
        async with self._changed:
            self._changed.notify_all()

    # Reading -------------------------------------------------------------------------------

    async def death(self, sandbox_id: str) -> c.DeathCertificate | None:
        return self._deaths.get(sandbox_id)

    async def events(self, kind: str, scope: str = "") -> list[c.SandboxEvent]:
        chosen = [r.event for r in self._log if _in_index(r.event, kind, scope)]
        return sorted(chosen, key=lambda e: e.event_id)

    async def revision(self) -> int:
        return self._revision

    async def after(self, event_id: str) -> Replay:
        check_event_id(event_id)
        seen = next((r for r in self._log if r.event.event_id == event_id), None)
        if seen is None:
            raise expired(event_id)
        return Replay([r for r in self._log if r.revision > seen.revision], self._revision)

    async def watch(self, start_revision: int) -> AsyncIterator[Recorded]:
        position = start_revision - 1
        while True:
            if self.fail_watch is not None:
                failure, self.fail_watch = self.fail_watch, None
                raise failure
            for recorded in [r for r in self._log if r.revision > position]:
                position = recorded.revision
                yield recorded
            async with self._changed:
                if self.fail_watch is None and not any(r.revision > position for r in self._log):
                    await self._changed.wait()


def _in_index(event: c.SandboxEvent, kind: str, scope: str) -> bool:
    if kind == EVENTS:
        return True
    if kind == SANDBOX_EVENTS:
        return event.sandbox_id == scope
    if kind == KEY_EVENTS:
        return (event.owner_key_id or NO_KEY) == scope
    raise errors.InvalidArgument(f"unknown event index {kind!r}")
