"""Idempotent creates: the same caller's same `Idempotency-Key` within the TTL answers the
sandbox its first create made, through any gateway replica.

A key is claimed before its create runs, in a store every replica shares (idempotency_etcd.py;
in memory for a gateway on its own): the first call claims it and creates, the others wait for
the claim to turn into the sandbox, or to go (the create failed, or its gateway died) and then
claim it themselves. So a retry through another replica, or two replicas receiving one key at
once, make one sandbox. Keys are scoped by the caller's API key id: one caller's key never
answers another caller's sandbox. Calls with one key on one gateway share the create in flight
without asking the store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, InvalidArgument

log = logging.getLogger(__name__)

_KEY_CHARS = frozenset(string.ascii_lowercase + string.digits + "-")
_KEY_RULE = "1-255 characters of [a-z0-9-]"

Record = cluster_pb2.SandboxRecord
Create = Callable[[], Awaitable[Record]]


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


def scoped_name(caller: str, key: str) -> str:
    """The store's name of `caller`'s `key`: `<caller>.<key>`, a batch item's `/` as `.` (no
    `/` in a record id). Distinct pairs never meet: callers (key ids: `admin` or hex) and
    client keys hold no `.`, so the first `.` ends the caller and `.<i>` is always an item."""
    return f"{caller}.{key.replace('/', '.')}"


@dataclass(frozen=True)
class Held:
    """A claim this gateway made: its create is in flight."""

    name: str
    revision: int


# What a claim found: this gateway's claim, the sandbox made under the key, or None (another
# create holds the key: ask again).
Claim = Held | Record | None


class KeyClaims(Protocol):
    """Where the keys live (every replica must share it for a retry through another to hold)."""

    async def claim(self, name: str) -> Claim: ...

    async def finish(self, held: Held, record: Record) -> None:
        """Answers `record` to the key's later calls, for the TTL."""

    async def release(self, held: Held) -> None:
        """Forgets the claim (the create failed): the next call creates."""


class InMemoryKeyClaims:
    """One gateway's keys: tests, and a gateway without etcd."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_s
        self._clock = clock
        # name -> (its revision, the sandbox made (None: in flight), when it expires)
        self._entries: dict[str, tuple[int, Record | None, float]] = {}
        self._revision = 0

    async def claim(self, name: str) -> Claim:
        now = self._clock()
        entry = self._entries.get(name)
        if entry is not None and (entry[1] is None or entry[2] > now):
            return entry[1]
        self._revision += 1
        self._entries[name] = (self._revision, None, now)
        return Held(name, self._revision)

    async def finish(self, held: Held, record: Record) -> None:
        if self._mine(held):
            self._entries[held.name] = (held.revision, record, self._clock() + self._ttl)

    async def release(self, held: Held) -> None:
        if self._mine(held):
            del self._entries[held.name]

    def _mine(self, held: Held) -> bool:
        entry = self._entries.get(held.name)
        return entry is not None and entry[0] == held.revision


class IdempotentCreates:
    def __init__(
        self,
        claims: KeyClaims,
        poll_s: float = 0.05,
        max_poll_s: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._claims = claims
        # A key held elsewhere is asked for again after poll_s, doubling up to max_poll_s: a
        # retry soon after is answered soon, a create of minutes costs few reads.
        self._poll_s = poll_s
        self._max_poll_s = max_poll_s
        self._sleep = sleep
        self._local: dict[str, asyncio.Future[Record]] = {}

    async def run(self, caller: str, key: str, create: Create) -> Record:
        """The sandbox `caller`'s `key` names: the one made before, or the one `create` makes.

        :raise AenvError: the create failed (the key is free again), or the store is
            unreachable (nothing was created).
        """
        name = scoped_name(caller, key)
        while (local := self._local.get(name)) is not None:
            try:
                return await asyncio.shield(local)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                # Its caller went away and the create with it: this call tries itself.
        future: asyncio.Future[Record] = asyncio.get_running_loop().create_future()
        self._local[name] = future
        try:
            record = await self._claimed(name, create)
        except BaseException as err:
            if isinstance(err, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(err)
                future.exception()  # mark retrieved: waiters (if any) re-raise it
            raise
        finally:
            del self._local[name]
        future.set_result(record)
        return record

    async def _claimed(self, name: str, create: Create) -> Record:
        wait = self._poll_s
        while True:
            claim = await self._claims.claim(name)
            if isinstance(claim, Held):
                break
            if claim is not None:
                return claim
            # Another replica's create: it ends (its sandbox, or the key freed) or its
            # gateway dies and the claim expires with its lease.
            await self._sleep(wait)
            wait = min(wait * 2, self._max_poll_s)
        try:
            record = await create()
        except BaseException:
            with contextlib.suppress(AenvError):
                await self._claims.release(claim)
            raise
        try:
            await self._claims.finish(claim, record)
        except AenvError as err:
            # The sandbox exists and is answered; only a later retry of the key may not find it.
            log.warning(
                "idempotency key not kept",
                extra={"sandbox_id": record.sandbox_id, "error": err.message},
            )
        return record
