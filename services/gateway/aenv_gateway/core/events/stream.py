"""Following events live: ONE etcd watch per gateway on `events/`, fanned out to every
subscriber through its own bounded queue.

The hub never waits for a subscriber: an event that finds a subscriber's queue full cuts that
subscriber (ResourceExhausted, after it drained what it had) and the others go on. A subscriber
that resumes after an event it saw is registered first, then reads what was committed after that
event (one range read, at revision R), then takes from its queue only events past R: nothing
committed after the read can be missing from the queue (the hub delivers every event committed
after the subscriber joined), and nothing before it is delivered twice. A client that reconnects
with the last id it saw therefore misses nothing still retained: at least once across reconnects.

When the watch itself fails (etcd restarted, compacted), every subscriber is cut (Unavailable) so
it resumes from its last id, and the hub watches again from the current revision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError, ResourceExhausted, Unavailable
from aenv_gateway.core.events.reader import EventFilter
from aenv_gateway.core.events.store import EventStore, Recorded

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


class Subscription:
    """One subscriber's events: a replay read when it joined, then what the hub hands it."""

    def __init__(self, wanted: EventFilter, queue_size: int) -> None:
        self.wanted = wanted
        self._queue: asyncio.Queue[Recorded | None] = asyncio.Queue(queue_size)
        self._backlog: deque[c.SandboxEvent] = deque()
        self._floor = 0  # the replay's revision: queued events at or below it were replayed
        self._error: AenvError | None = None

    def offer(self, recorded: Recorded) -> bool:
        """Called by the hub, never blocks. False: the subscriber fell behind and is cut."""
        if self._error is not None:
            return False
        if not self.wanted.admits(recorded.event):
            return True
        try:
            self._queue.put_nowait(recorded)
        except asyncio.QueueFull:
            self._error = ResourceExhausted(
                f"the subscriber fell {self._queue.maxsize} events behind and was cut: "
                "resume after the last event id it received")
            return False
        return True

    def cut(self, error: AenvError | None = None) -> None:
        """Ends the subscription with `error` (or the one it already has), waking its reader."""
        if self._error is None:
            self._error = error or Unavailable("the subscription ended")
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    def replayed(self, events: list[Recorded], revision: int) -> None:
        self._backlog.extend(r.event for r in events if self.wanted.admits(r.event))
        self._floor = revision

    async def next(self, timeout: float | None = None) -> c.SandboxEvent | None:  # noqa: ASYNC109
        """The next event; None when `timeout` passed without one.

        :raise ResourceExhausted: it fell behind (after what it had queued).
        :raise Unavailable: the hub's watch failed.
        """
        if self._backlog:
            return self._backlog.popleft()
        while True:
            if self._queue.empty() and self._error is not None:
                raise self._error
            try:
                recorded = await asyncio.wait_for(self._queue.get(), timeout)
            except TimeoutError:
                return None
            if recorded is not None and recorded.revision > self._floor:
                return recorded.event


class EventHub:
    def __init__(self, store: EventStore, queue_size: int = 1024) -> None:
        self._store = store
        self._queue_size = queue_size
        self._subscribers: set[Subscription] = set()
        self._revision = 0
        self._task: asyncio.Task[None] | None = None
        self.watches_opened = 0

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def start(self) -> None:
        """Reads the store's revision (Unavailable if it does not answer), then follows from
        just past it in the background."""
        self._revision = await self._store.revision()
        self._task = asyncio.create_task(self._follow(), name="event-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for subscriber in list(self._subscribers):
            subscriber.cut(Unavailable("the gateway is stopping: resume after the last event id"))

    @contextlib.asynccontextmanager
    async def subscribe(
        self, wanted: EventFilter, after_event_id: str = ""
    ) -> AsyncIterator[Subscription]:
        """A subscription from now, or from just after `after_event_id`.

        :raise OutOfRange: `after_event_id` is no longer retained.
        :raise InvalidArgument: it is not an event id.
        """
        subscriber = Subscription(wanted, self._queue_size)
        self._subscribers.add(subscriber)  # before the replay's read: see the module's note
        try:
            if after_event_id:
                replay = await self._store.after(after_event_id)
                subscriber.replayed(replay.events, replay.revision)
            yield subscriber
        finally:
            self._subscribers.discard(subscriber)

    async def events(
        self, wanted: EventFilter, after_event_id: str = ""
    ) -> AsyncIterator[c.SandboxEvent]:
        """The subscription as an iterator (the gRPC stream's shape)."""
        async with self.subscribe(wanted, after_event_id) as subscriber:
            while True:
                event = await subscriber.next()
                if event is not None:
                    yield event

    def _fan_out(self, recorded: Recorded) -> None:
        for subscriber in list(self._subscribers):
            if not subscriber.offer(recorded):
                self._subscribers.discard(subscriber)
                subscriber.cut()  # with the error offer() gave it
                log.warning("event subscriber fell behind; cut",
                            extra={"caller": subscriber.wanted.caller})

    async def _follow(self) -> None:
        failures = 0
        while True:
            try:
                self.watches_opened += 1
                async for recorded in self._store.watch(self._revision + 1):
                    failures = 0
                    self._revision = max(self._revision, recorded.revision)
                    self._fan_out(recorded)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # any failure of the watch: the same recovery
                log.warning("event watch failed", extra={"error": repr(err), "failures": failures})
            failures = await self._restart(failures)

    async def _restart(self, failures: int) -> int:
        """Reads the revision to watch from, then cuts every subscriber (in that order: one that
        joins after the cut replays from at or past that revision, so the new watch covers it)."""
        while True:
            await asyncio.sleep(RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S) - 1)])
            failures += 1
            try:
                self._revision = await self._store.revision()
            except AenvError as err:
                log.warning("event store unavailable", extra={"error": err.message})
                continue
            for subscriber in list(self._subscribers):
                self._subscribers.discard(subscriber)
                subscriber.cut(Unavailable(
                    "the event stream was interrupted: resume after the last event id"))
            return failures
