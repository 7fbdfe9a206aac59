"""The wing's answers about its guests' figures: a live sample of envd's, and the kept history
(sandbox_metrics.py) the sampler fills."""

from __future__ import annotations

import logging
import time

import aiohttp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound, Unavailable
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox_metrics import (
    ALL_TIME,
    SAMPLE_ERRORS,
    MetricSample,
    MetricsHistory,
    Window,
)

log = logging.getLogger(__name__)


class GuestMetrics:
    """Samples of this node's guests, live and kept (`history`)."""

    def __init__(self, wing: WingContext) -> None:
        self._registry = wing.registry
        self._envd = wing.envd
        self.history = MetricsHistory(wing.settings.metrics_max_samples)

    # What the sampler asks of its sandboxes (sandbox_metrics.Sampled).
    def sampling_targets(self) -> list[str]:
        return self._registry.sampling_targets()

    def is_running(self, sandbox_id: str) -> bool:
        return self._registry.is_running(sandbox_id)

    async def sample(self, sandbox_id: str) -> MetricSample:
        """One live sample of envd's figures.

        :raise Unavailable: the guest does not answer.
        """
        sandbox = self._registry.get(sandbox_id)
        try:
            data = await self._envd.metrics(sandbox.host, sandbox.record.envd_access_token)
            return MetricSample.from_envd(data, time.time())
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise Unavailable(f"envd of \"{sandbox_id}\" did not answer: {err!r}") from err

    async def metrics(self, sandbox_id: str, window: Window = ALL_TIME) -> list[MetricSample]:
        """The kept samples in the window, oldest first. A running sandbox not sampled yet gets
        one live sample, so a fresh sandbox answers too; a paused one, what was sampled before
        its pause."""
        record = self._registry.record(sandbox_id)  # NotFound for unknown ids
        paused = record.state == cluster_pb2.SANDBOX_STATE_PAUSED
        if (not paused and not self.history.has(sandbox_id)
                and not self._registry.is_busy(sandbox_id)):
            self.history.add(sandbox_id, await self.sample(sandbox_id))
        return self.history.window(sandbox_id, window)

    async def latest(self, sandbox_id: str) -> MetricSample | None:
        """The newest sample (a live one when there is none yet); None when the guest does not
        answer or an operation holds the sandbox. Paused ones keep their newest sample."""
        try:
            await self.metrics(sandbox_id)
        except NotFound:
            pass  # unknown
        except SAMPLE_ERRORS as err:
            log.debug("live metrics sample failed",
                      extra={"sandbox_id": sandbox_id, "error": repr(err)})
        return self.history.latest(sandbox_id)
