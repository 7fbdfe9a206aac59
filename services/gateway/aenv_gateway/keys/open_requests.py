"""What a key has open: every request made with an API key, on either edge, runs
held by its key (`OpenRequests.held`). Revoking a stored key cancels the tasks it holds at
once: a request cut before its answer started is answered 401 / UNAUTHENTICATED, one whose
answer was flowing (a stream) ends there. And a key holds at most `limit` requests at a time:
thousands of idle streams from one key are refused (429 / RESOURCE_EXHAUSTED) without
costing other keys anything.

A key "started" the requests that carried it. E2B's SDKs send the API key to the control plane
only; their sandbox traffic carries the sandbox's envd access token, a separate credential
(what E2B does too): revoking a key cuts no stream that did not carry it, and sandboxes it
created run on until killed.

Registration happens once per request, not per chunk: the proxy's hot path is untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aenv_common.errors import ResourceExhausted, Unauthenticated


class KeyRevoked(Unauthenticated):
    """The key of a running request was revoked."""


class OpenRequests:
    """The tasks each key has running, cancelled when the key is revoked, at most `limit`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._by_key: dict[str, set[asyncio.Task[object]]] = {}
        self._revoked: set[asyncio.Task[object]] = set()

    def open_count(self, key_id: str) -> int:
        return len(self._by_key.get(key_id, ()))

    @asynccontextmanager
    async def held(self, key_id: str) -> AsyncIterator[None]:
        """Runs the body as one of `key_id`'s requests (in the current task).

        :raise ResourceExhausted: the key holds `limit` requests already.
        :raise KeyRevoked: the key was revoked while the body ran."""
        task = asyncio.current_task()
        assert task is not None
        tasks = self._by_key.setdefault(key_id, set())
        if len(tasks) >= self._limit:
            raise ResourceExhausted(
                f"this API key has {self._limit} requests open, the most it may hold at once"
            )
        tasks.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if task in self._revoked and task.uncancel() == 0:
                raise KeyRevoked("Invalid API key: it was revoked") from None
            raise  # (also) cancelled for another reason: client gone, shutdown
        else:
            if task in self._revoked:  # the body swallowed the cancel: take it back
                task.uncancel()
        finally:
            self._revoked.discard(task)
            tasks.discard(task)
            if not tasks and self._by_key.get(key_id) is tasks:
                del self._by_key[key_id]

    def cut(self, key_ids: set[str]) -> None:
        """Cancels the requests of the revoked keys `key_ids`."""
        for key_id in key_ids:
            for task in self._by_key.pop(key_id, set()):
                self._revoked.add(task)
                task.cancel()
