"""Retries of the calls that are safe to send again — reads, and creates (which always carry an
idempotency key) — when the gateway did not answer (UNAVAILABLE), within the call's deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

T = TypeVar("T")

# A gateway restarting or a connection re-established: worth another try.
_RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # in all, the first one included
    backoff_s: float = 0.2  # before the second attempt; doubled before each later one
    max_backoff_s: float = 2.0


async def with_retries(
    attempt: Callable[[float], Awaitable[T]],
    policy: RetryPolicy,
    timeout_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`attempt(seconds left)` until it answers, fails otherwise, or the deadline or the
    attempts run out (then the last failure is raised)."""
    deadline = clock() + timeout_s
    backoff = policy.backoff_s
    for remaining in range(policy.attempts - 1, -1, -1):
        try:
            return await attempt(max(deadline - clock(), 0.001))
        except grpc.aio.AioRpcError as err:
            if err.code() not in _RETRIED or not remaining or clock() + backoff >= deadline:
                raise
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, policy.max_backoff_s)
    raise AssertionError("unreachable: the last attempt returns or raises")
