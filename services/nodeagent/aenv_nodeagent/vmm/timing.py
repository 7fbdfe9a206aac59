"""Per-phase wall-clock durations, so benchmarks can report host-side phases separately."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class PhaseClock:
    """Records how long each named phase took, in milliseconds."""

    def __init__(self) -> None:
        self.phases_ms: dict[str, float] = {}

    @contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases_ms[phase] = (time.perf_counter() - started) * 1000.0
