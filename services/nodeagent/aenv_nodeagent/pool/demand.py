"""How many woken guests the warm pool keeps for a template: as many as it was asked for
recently, within a cap, and none for a template nobody asked for a while.

A create that finds the pool empty waits for a whole restore and warm-up, so the pool follows
what creates did in the last `window_s`: a burst of 8 makes it keep 8 until the burst is that
far in the past, then 1 until the template has been idle for `idle_s`, then none (their memory
goes back to the host).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class Demand:
    def __init__(
        self, cap: int, *, window_s: float = 60.0, idle_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cap = cap
        self._window_s = window_s
        self._idle_s = idle_s
        self._clock = clock
        self._takes: dict[str, deque[float]] = {}

    @property
    def cap(self) -> int:
        return self._cap

    def took(self, key: str) -> None:
        """A create asked the pool for a guest of `key` (whether it got one or not)."""
        takes = self._takes.setdefault(key, deque())
        takes.append(self._clock())
        self._trim(takes)

    def target(self, key: str) -> int:
        """Woken guests to keep for `key` now."""
        takes = self._takes.get(key)
        if not takes or self._cap <= 0:
            return 0
        self._trim(takes)
        if self._clock() - takes[-1] > self._idle_s:
            return 0
        return min(self._cap, len(takes))

    def forget(self, key: str) -> None:
        self._takes.pop(key, None)

    def _trim(self, takes: deque[float]) -> None:
        """Keeps the takes of the window, and the last one (its age says whether `key` idles)."""
        now = self._clock()
        while len(takes) > 1 and now - takes[0] > self._window_s:
            takes.popleft()
