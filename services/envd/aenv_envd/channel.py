"""A bounded single-consumer event queue whose producer waits when it is full (backpressure)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class EventChannel(Generic[T]):
    """Events for one stream. `put` waits while the consumer is behind, so a fast producer is
    slowed down instead of buffering without bound; `abandon` releases a blocked producer."""

    def __init__(self, maxsize: int = 256) -> None:
        self._items: deque[T] = deque()
        self._maxsize = maxsize
        self._closed = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, item: T) -> None:
        while len(self._items) >= self._maxsize and not self._closed:
            self._writable.clear()
            await self._writable.wait()
        if self._closed:
            return
        self._items.append(item)
        self._readable.set()

    def finish(self, last: T | None = None) -> None:
        """Producer is done: append a final item (beyond the bound) and close."""
        if last is not None and not self._closed:
            self._items.append(last)
        self._closed = True
        self._readable.set()
        self._writable.set()

    def abandon(self) -> None:
        """Consumer is gone: drop what is queued and never block the producer again."""
        self._closed = True
        self._items.clear()
        self._readable.set()
        self._writable.set()

    async def get(self, idle_timeout_s: float | None = None) -> T | None:
        """Next item; None once closed and drained; TimeoutError after `idle_timeout_s` idle."""
        while not self._items:
            if self._closed:
                return None
            self._readable.clear()
            async with asyncio.timeout(idle_timeout_s):
                await self._readable.wait()
        item = self._items.popleft()
        self._writable.set()
        return item
