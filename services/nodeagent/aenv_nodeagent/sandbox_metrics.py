"""Metrics history of this node's sandboxes, kept the way E2B keeps it: every few seconds each
running sandbox's envd `GET /metrics` is sampled into a bounded ring per sandbox, and
`GetSandboxMetrics` answers windows of that ring.

Sampling runs in tasks of its own, one in flight per sandbox at most, and skips sandboxes that are
busy (create, pause, snapshot, fork, reset): a slow or silent guest costs a missed sample, never
time on a lifecycle path.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, InvalidArgument

log = logging.getLogger(__name__)

# 720 samples = the last hour at E2B's 5 s interval, about 100 KB per sandbox.
DEFAULT_MAX_SAMPLES = 720


@dataclass(frozen=True, slots=True)
class MetricSample:
    ts: float  # unix seconds, host clock
    cpu_count: int
    cpu_used_pct: float
    mem_used: int
    mem_total: int
    mem_cache: int
    disk_used: int
    disk_total: int

    @classmethod
    def from_envd(cls, data: Mapping[str, object], ts: float) -> MetricSample:
        """From envd's `/metrics` document. The host's clock stamps it: a restored guest's clock
        lags by the time it spent paused or snapshotted until `/init` resets it."""

        def num(name: str) -> float:
            value = data.get(name, 0)
            if not isinstance(value, int | float):
                raise ValueError(f"envd /metrics: {name} is not a number")
            return value

        return cls(
            ts=ts,
            cpu_count=int(num("cpu_count")),
            cpu_used_pct=float(num("cpu_used_pct")),
            mem_used=int(num("mem_used")),
            mem_total=int(num("mem_total")),
            mem_cache=int(num("mem_cache")),
            disk_used=int(num("disk_used")),
            disk_total=int(num("disk_total")),
        )

    def to_proto(self) -> nodeagent_pb2.SandboxMetric:
        metric = nodeagent_pb2.SandboxMetric(
            cpu_count=self.cpu_count, cpu_used_pct=self.cpu_used_pct,
            mem_used=self.mem_used, mem_total=self.mem_total, mem_cache=self.mem_cache,
            disk_used=self.disk_used, disk_total=self.disk_total,
        )
        # Microseconds: float seconds carry no more, and `ts * 1e9` would show rounding noise.
        metric.timestamp.FromMicroseconds(round(self.ts * 1e6))
        return metric


@dataclass(frozen=True)
class Window:
    """Unix seconds, both ends inclusive; None is open on that side."""

    start: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start > self.end:
            raise InvalidArgument("start must not be after end")

    @classmethod
    def of(cls, request: nodeagent_pb2.GetSandboxMetricsRequest) -> Window:
        return cls(
            request.start if request.HasField("start") else None,
            request.end if request.HasField("end") else None,
        )

    def contains(self, ts: float) -> bool:
        # Whole seconds, like the `timestampUnix` clients see and the bounds they send.
        second = int(ts)
        return (self.start is None or self.start <= second) and (
            self.end is None or second <= self.end
        )


ALL_TIME = Window()


class MetricsHistory:
    """A ring of samples per sandbox, oldest first; the oldest drop out once a ring is full."""

    def __init__(self, max_samples: int = DEFAULT_MAX_SAMPLES) -> None:
        if max_samples < 1:
            raise InvalidArgument("max_samples must be at least 1")
        self._max = max_samples
        self._rings: dict[str, deque[MetricSample]] = {}

    def add(self, sandbox_id: str, sample: MetricSample) -> None:
        ring = self._rings.get(sandbox_id)
        if ring is None:
            ring = self._rings[sandbox_id] = deque(maxlen=self._max)
        ring.append(sample)

    def has(self, sandbox_id: str) -> bool:
        return bool(self._rings.get(sandbox_id))

    def window(self, sandbox_id: str, window: Window = ALL_TIME) -> list[MetricSample]:
        return [s for s in self._rings.get(sandbox_id, ()) if window.contains(s.ts)]

    def latest(self, sandbox_id: str) -> MetricSample | None:
        ring = self._rings.get(sandbox_id)
        return ring[-1] if ring else None

    def drop(self, sandbox_id: str) -> None:
        self._rings.pop(sandbox_id, None)

    def retain(self, keep: Collection[str]) -> None:
        """Drops the rings of sandboxes that no longer exist (e.g. killed while paused)."""
        for sandbox_id in [sid for sid in self._rings if sid not in keep]:
            del self._rings[sandbox_id]

    def ids(self) -> list[str]:
        return list(self._rings)


class Sampled(Protocol):
    """What the sampler needs of the sandbox manager."""

    def sampling_targets(self) -> list[str]:
        """Running sandboxes that no operation holds right now."""
        ...

    def is_running(self, sandbox_id: str) -> bool: ...

    async def sample(self, sandbox_id: str) -> MetricSample: ...


# A guest that does not answer (yet): the sample is skipped, quietly.
SAMPLE_ERRORS = (AenvError, aiohttp.ClientError, TimeoutError, ValueError)


class MetricsSampler:
    def __init__(
        self,
        sandboxes: Sampled,
        history: MetricsHistory,
        *,
        interval_s: float,
        timeout_s: float,
        kept: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self._sandboxes = sandboxes
        self._history = history
        self._interval = interval_s
        self._timeout = timeout_s
        # Ids whose history stays (running and paused); default: the running ones.
        self._kept = kept or (lambda: set(sandboxes.sampling_targets()))
        self._inflight: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self._interval)
                try:
                    self.tick()
                except Exception:
                    log.exception("metrics sampling pass failed")
        finally:
            await self.close()

    def tick(self) -> None:
        """Starts one sample per running sandbox, unless the previous one is still waiting."""
        self._history.retain(set(self._kept()))
        for sandbox_id in self._sandboxes.sampling_targets():
            if sandbox_id in self._inflight:
                continue
            task = asyncio.create_task(self._sample(sandbox_id))
            self._inflight[sandbox_id] = task
            task.add_done_callback(self._finished(sandbox_id))

    def _finished(self, sandbox_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(_: asyncio.Task[None]) -> None:
            self._inflight.pop(sandbox_id, None)

        return done

    async def _sample(self, sandbox_id: str) -> None:
        try:
            sample = await asyncio.wait_for(self._sandboxes.sample(sandbox_id), self._timeout)
        except SAMPLE_ERRORS as err:
            log.debug("metrics sample skipped",
                      extra={"sandbox_id": sandbox_id, "error": repr(err)})
            return
        except Exception:
            log.warning("metrics sample failed", extra={"sandbox_id": sandbox_id},
                        exc_info=True)
            return
        # Killed or paused while envd answered: nothing to record for it.
        if self._sandboxes.is_running(sandbox_id):
            self._history.add(sandbox_id, sample)

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
