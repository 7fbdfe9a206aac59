"""A bounded single-consumer event queue whose producer waits when it is full (backpressure)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class EventChannel(Generic[T]):
    """Events for one stream. `put` waits while the consumer is behind (more than `maxsize` items
    or `max_bytes` queued), so a fast producer is slowed down instead of buffering without bound;
    `abandon` releases a blocked producer."""

    def __init__(self, maxsize: int = 256, max_bytes: int = 4 * 1024 * 1024) -> None:
        self._items: deque[tuple[T, int]] = deque()
        self._maxsize = maxsize
        self._max_bytes = max_bytes
        self._bytes = 0
        self._closed = False
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def _full(self) -> bool:
        return len(self._items) >= self._maxsize or self._bytes >= self._max_bytes

    async def wait_room(self) -> None:
        """Returns once another item (or more bytes) may be queued, or the channel closed."""
        while self._full() and not self._closed:
            self._writable.clear()
            await self._writable.wait()

    async def put(self, item: T, size: int = 0) -> None:
        await self.wait_room()
        self.put_nowait(item, size)

    def put_nowait(self, item: T, size: int = 0) -> None:
        if self._closed:
            return
        self._items.append((item, size))
        self._bytes += size
        self._readable.set()

    def tail(self) -> T | None:
        """The newest item the consumer has not taken yet (a producer may still extend it)."""
        return self._items[-1][0] if self._items and not self._closed else None

    def grew(self, size: int) -> None:
        """The producer added `size` bytes to the tail item."""
        item, old = self._items[-1]
        self._items[-1] = (item, old + size)
        self._bytes += size

    def finish(self, last: T | None = None) -> None:
        """Producer is done: append a final item (beyond the bound) and close."""
        if last is not None and not self._closed:
            self._items.append((last, 0))
        self._closed = True
        self._readable.set()
        self._writable.set()

    def abandon(self) -> None:
        """Consumer is gone: drop what is queued and never block the producer again."""
        self._closed = True
        self._items.clear()
        self._bytes = 0
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
        item, size = self._items.popleft()
        self._bytes -= size
        self._writable.set()
        return item
