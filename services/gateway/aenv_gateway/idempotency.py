"""Idempotent creates: the same `Idempotency-Key` within the TTL yields the first result.

Concurrent requests with one key share a single in-flight create; a failed create is not
remembered, so the client's retry with the same key tries again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    result: asyncio.Future[T]
    expires: float


class IdempotencyCache(Generic[T]):
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        self._entries: dict[str, _Entry[T]] = {}

    async def run(self, key: str, create: Callable[[], Awaitable[T]]) -> T:
        self._expire()
        entry = self._entries.get(key)
        if entry is not None:
            return await asyncio.shield(entry.result)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._entries[key] = _Entry(future, self._clock() + self._ttl)
        try:
            value = await create()
        except BaseException as err:
            del self._entries[key]
            if not future.done():
                future.set_exception(err)
                future.exception()  # mark retrieved: waiters (if any) re-raise it
            raise
        future.set_result(value)
        return value

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, e in self._entries.items() if e.expires <= now and e.result.done()]:
            del self._entries[key]
