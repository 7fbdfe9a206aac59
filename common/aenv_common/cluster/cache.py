"""An in-memory mirror of one record kind, kept current by an etcd watch.

Readers (the gateway resolving a sandbox's owner, the scheduler placing on nodes) answer from
memory. The mirror loads a snapshot, then watches from the snapshot's revision + 1 so no event is
missed; when the watch fails (etcd restart, compaction) it reloads a fresh snapshot, diffs it
against what it had (so deletions made while it was blind are seen) and watches again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from aetcd.rtypes import Watch
from google.protobuf.message import Message

from aenv_common import errors
from aenv_common.cluster.codec import decode
from aenv_common.cluster.store import ClusterStore, Versioned, etcd_errors

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Message)

# Called with (record id, new value or None when deleted).
Listener = Callable[[str, "Versioned[T] | None"], None]

RESYNC_BACKOFF_SECONDS = (0.1, 0.2, 0.5, 1.0, 2.0)


class RecordCache(Generic[T]):
    def __init__(self, store: ClusterStore, kind: str, record_type: type[T]) -> None:
        self._store = store
        self._kind = kind
        self._type = record_type
        self._entries: dict[str, Versioned[T]] = {}
        self._listeners: list[Listener[T]] = []
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.revision = 0
        self.resyncs = 0

    # Reading -----------------------------------------------------------------------------

    def get(self, record_id: str) -> T | None:
        entry = self._entries.get(record_id)
        return None if entry is None else entry.record

    def entry(self, record_id: str) -> Versioned[T] | None:
        return self._entries.get(record_id)

    def values(self) -> list[T]:
        return [entry.record for entry in self._entries.values()]

    def ids(self) -> set[str]:
        return set(self._entries)

    def add_listener(self, listener: Listener[T]) -> None:
        """`listener` runs synchronously in the event loop after each applied change."""
        self._listeners.append(listener)

    async def wait_for(
        self,
        record_id: str,
        predicate: Callable[[T | None], bool],
        timeout: float,  # noqa: ASYNC109 (a bound on this wait, part of the API)
    ) -> T | None:
        """Waits until `predicate(get(record_id))` holds; DeadlineExceeded after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.get(record_id)
            if predicate(current):
                return current
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.DeadlineExceeded(
                    f"{self._kind} '{record_id}' did not reach the awaited state in {timeout} s"
                )
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    # Lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the first snapshot and opens the watch (raises Unavailable if etcd is down);
        from then on follows changes in the background."""
        await self._resync()
        watch = await self._open_watch()
        self._task = asyncio.create_task(self._follow(watch), name=f"record-cache-{self._kind}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # Internals ---------------------------------------------------------------------------

    async def _follow(self, watch: Watch) -> None:
        failures = 0
        while True:
            try:
                await self._consume(watch)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                # Any watch failure (connection loss, compaction, server restart) ends in the
                # same recovery: back off, reload everything, watch again.
                log.warning(
                    "watch failed; resyncing",
                    extra={"kind": self._kind, "error": repr(err), "failures": failures},
                )
            watch, failures = await self._resync_with_backoff(failures)

    async def _resync_with_backoff(self, failures: int) -> tuple[Watch, int]:
        while True:
            backoff = RESYNC_BACKOFF_SECONDS[min(failures, len(RESYNC_BACKOFF_SECONDS) - 1)]
            await asyncio.sleep(backoff)
            try:
                await self._resync()
                return await self._open_watch(), 0
            except errors.AenvError as err:
                failures += 1
                log.warning("resync failed", extra={"kind": self._kind, "error": err.message})

    async def _open_watch(self) -> Watch:
        store = self._store
        with etcd_errors(f"watch {self._kind}"):
            watch: Watch = await store.client.watch_prefix(
                store.keys.collection(self._kind), start_revision=self.revision + 1
            )
        return watch

    async def _consume(self, watch: Watch) -> None:
        with etcd_errors(f"watch {self._kind}"):
            try:
                async for event in watch:
                    self._apply_event(event)
            finally:
                with contextlib.suppress(Exception):
                    await watch.cancel()
        # The iterator only ends without an error when the client shut the watcher down.
        raise errors.Unavailable(f"watch on {self._kind} ended")

    def _apply_event(self, event: object) -> None:
        kv = event.kv  # type: ignore[attr-defined]
        record_id = self._store.keys.id_from_key(self._kind, kv.key)
        self.revision = max(self.revision, kv.mod_revision)
        if event.kind == "DELETE":  # type: ignore[attr-defined]
            if self._entries.pop(record_id, None) is not None:
                self._notify(record_id, None)
            return
        try:
            record = decode(self._type, kv.value)
        except errors.Internal:
            log.error("skipping corrupt record", extra={"kind": self._kind, "record_id": record_id})
            return
        entry = Versioned(record, kv.mod_revision, kv.create_revision, kv.lease)
        self._entries[record_id] = entry
        self._notify(record_id, entry)

    async def _resync(self) -> None:
        revision, fresh = await self._store.snapshot(self._kind, self._type)
        old = self._entries
        self._entries = fresh
        self.revision = revision
        self.resyncs += 1
        for record_id in old.keys() - fresh.keys():
            self._notify(record_id, None)
        for record_id, entry in fresh.items():
            previous = old.get(record_id)
            if previous is None or previous.mod_revision != entry.mod_revision:
                self._notify(record_id, entry)

    def _notify(self, record_id: str, entry: Versioned[T] | None) -> None:
        for listener in self._listeners:
            try:
                listener(record_id, entry)
            except Exception:
                log.exception("cache listener failed", extra={"kind": self._kind})
        # Wake every waiter, then arm a fresh event for the next change.
        self._changed.set()
        self._changed = asyncio.Event()
