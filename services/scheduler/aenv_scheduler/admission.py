"""The admission queue: bursts wait for capacity instead of being dropped.

A request that cannot be placed now waits (in arrival order) until the cluster changes (a node
joins or reports freed capacity, a reservation ends) and is retried then; after its wait it fails
with RESOURCE_EXHAUSTED, as does one arriving at a full queue: both say when to try again
(`retry_after_s`: HTTP Retry-After at the gateway). Every request ends in exactly one of: placed,
a typed error, or cancelled by its caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from aenv_common import errors

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Res = TypeVar("Res")

# Tries to place a request now: the result, None if it must wait, or a typed error.
TryPlace = Callable[[Req], "Res | None"]


class AdmissionQueue(Generic[Req, Res]):
    def __init__(
        self, try_place: TryPlace[Req, Res], max_queued: int, retry_after_s: float = 5.0
    ) -> None:
        self._try_place = try_place
        self._max_queued = max_queued
        self._retry_after_s = retry_after_s
        self._waiting: deque[tuple[Req, asyncio.Future[Res]]] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    async def admit(self, request: Req, wait_seconds: float) -> Res:
        if not self._waiting:
            placed = self._try_place(request)
            if placed is not None:
                return placed
        if len(self._waiting) >= self._max_queued:
            raise errors.at_capacity("the admission queue is full", self._retry_after_s)
        future: asyncio.Future[Res] = asyncio.get_running_loop().create_future()
        entry = (request, future)
        self._waiting.append(entry)
        if len(self._waiting) > 1:
            self.retry_waiting()  # others wait for larger shares: this one may fit already
        try:
            return await asyncio.wait_for(asyncio.shield(future), wait_seconds)
        except TimeoutError:
            raise errors.at_capacity(
                f"no room for this sandbox within {wait_seconds:.1f} s", self._retry_after_s
            ) from None
        finally:
            self._forget(entry)

    def retry_waiting(self) -> None:
        """Retries every waiting request in arrival order; called when capacity may have
        appeared. Synchronous, so no other placement interleaves."""
        still_waiting: deque[tuple[Req, asyncio.Future[Res]]] = deque()
        for request, future in self._waiting:
            if future.done():
                continue
            try:
                placed = self._try_place(request)
            except errors.AenvError as err:
                future.set_exception(err)
                continue
            if placed is None:
                still_waiting.append((request, future))
            else:
                future.set_result(placed)
        self._waiting = still_waiting

    def _forget(self, entry: tuple[Req, asyncio.Future[Res]]) -> None:
        future = entry[1]
        if not future.done():
            # Timed out or cancelled while waiting: leave the queue.
            future.cancel()
            with contextlib.suppress(ValueError):
                self._waiting.remove(entry)
        elif not future.cancelled():
            future.exception()  # mark retrieved: the caller may have given up meanwhile
