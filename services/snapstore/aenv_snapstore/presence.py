"""Memory of which chunks are known to be stored, so deduplication does not cost one object-store
round trip (an S3 HEAD) per chunk per push.

Sound within one snapstore process: chunks are immutable, and only this process's garbage
collection deletes them, which calls `forget`. With several replicas, garbage collection must run
on one of them and the others' entries can be stale for up to `ttl`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable


class PresenceCache:
    def __init__(self, ttl_seconds: float = 600.0, max_entries: int = 1_000_000) -> None:
        self._ttl = ttl_seconds
        self._max = max_entries
        # digest -> when it was confirmed stored; oldest first, for eviction.
        self._seen: OrderedDict[str, float] = OrderedDict()

    def known(self, digest: str) -> bool:
        confirmed = self._seen.get(digest)
        return confirmed is not None and time.monotonic() - confirmed < self._ttl

    def add(self, digest: str) -> None:
        self._seen.pop(digest, None)
        self._seen[digest] = time.monotonic()
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)

    def forget(self, digests: Iterable[str]) -> None:
        for digest in digests:
            self._seen.pop(digest, None)
