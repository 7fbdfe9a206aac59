"""When a failed delivery is tried again, and when it is given up on.

Exponential backoff with jitter: the n-th retry waits between half and all of
`initial * 2**(n-1)`, capped at `maximum`; receivers that failed together (one outage) do not
come back in lockstep. A delivery is given up after `max_attempts` attempts or once its first
attempt is `max_age_s` old, whichever comes first: a webhook's events go in order, so one event
may hold the next ones back only that long.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryPolicy:
    initial_s: float = 1.0
    maximum_s: float = 300.0
    max_attempts: int = 10
    max_age_s: float = 3600.0
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay(self, attempts: int) -> float:
        """The wait after the `attempts`-th failed attempt (1 for the first)."""
        ceiling = min(self.maximum_s, self.initial_s * 2.0 ** min(max(attempts - 1, 0), 62))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def exhausted(self, attempts: int, first_attempt_at: float, now: float) -> bool:
        """Whether to give up after `attempts` failed attempts, the first made at
        `first_attempt_at` (seconds, the caller's clock)."""
        return attempts >= self.max_attempts or now - first_attempt_at >= self.max_age_s
