"""Idempotent creates: the same `Idempotency-Key` within the TTL yields the first result.

Concurrent requests with one key share a single in-flight create; a failed create is not
remembered, so the client's retry with the same key tries again."""

from __future__ import annotations

import asyncio
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aenv_common.errors import InvalidArgument

T = TypeVar("T")

_KEY_CHARS = frozenset(string.ascii_lowercase + string.digits + "-")
_KEY_RULE = "1-255 characters of [a-z0-9-]"


def checked_key(value: str | None, name: str = "Idempotency-Key") -> str | None:
    """A client's key as given (None: none); the character set keeps a batch's item keys
    (`<key>/<i>`) apart from any key a client may send.

    :raise InvalidArgument: not 1-255 characters of [a-z0-9-].
    """
    if value is None:
        return None
    if not 1 <= len(value) <= 255 or not all(c in _KEY_CHARS for c in value):
        raise InvalidArgument(f"{name} must be {_KEY_RULE}")
    return value


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
