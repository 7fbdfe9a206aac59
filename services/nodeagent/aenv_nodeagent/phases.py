"""How a multi-step operation is timed, traced and undone.

`PhaseTimer` is the one timing mechanism: an operation opens a trace span, each phase a child span,
and the phases' milliseconds are kept for the operation's log line and its result. An operation
on a sandbox is one of its rollout's spans (aenv_common/rollout.py): it and its phases carry the
sandbox's rollout attributes, and one that no call started (a timeout, a lease's lapse, a death)
is parented by the sandbox's creator, in the trainer's trace. `Undo` is the one cleanup
mechanism: the steps a failure must take back, run newest first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TypeVar

from opentelemetry import trace

from aenv_common.rollout import AboutSandbox, rollout_attributes, sandbox_span
from aenv_nodeagent.metrics import OPERATION_SECONDS, PHASE_SECONDS

T = TypeVar("T")
log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)


class PhaseTimer:
    """The phases of one operation, in milliseconds, each traced as `<span_prefix>.<phase>`;
    an operation's time and its phases' also go to the node's Prometheus histograms."""

    def __init__(
        self, span_prefix: str = "sandbox", operation: str | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self.phases_ms: dict[str, float] = {}
        self._span_prefix = span_prefix
        self._operation = operation
        self._attributes = dict(attributes or {})

    @classmethod
    @contextlib.contextmanager
    def operation(
        cls, name: str, sandbox: AboutSandbox | None = None, **attributes: str
    ) -> Iterator[PhaseTimer]:
        """A timer whose phases are children of a new span `name` (e.g. `sandbox.create`);
        about `sandbox` (its spec or record), a span of its rollout (`sandbox_span`)."""
        started, outcome = time.perf_counter(), "error"
        named = {key.replace("_", "."): value for key, value in attributes.items()}
        span = (tracer.start_as_current_span(name, attributes=named) if sandbox is None
                else sandbox_span(tracer, name, sandbox, attributes=named))
        tags = rollout_attributes(sandbox) if sandbox is not None else {}
        with span:
            try:
                yield cls(operation=name, attributes=tags)
                outcome = "ok"
            finally:
                OPERATION_SECONDS.labels(name, outcome).observe(time.perf_counter() - started)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        with tracer.start_as_current_span(f"{self._span_prefix}.{name}",
                                          attributes=self._attributes):
            try:
                yield
            finally:
                elapsed = time.perf_counter() - started
                self.phases_ms[name] = elapsed * 1000
                if self._operation is not None:
                    PHASE_SECONDS.labels(self._operation, name).observe(elapsed)

    async def timed(self, name: str, awaitable: Awaitable[T]) -> T:
        with self.phase(name):
            return await awaitable

    def fields(self) -> dict[str, float]:
        """The phases as structured log fields (`<phase>_ms`)."""
        return ms_fields(self.phases_ms)


def ms_fields(phases_ms: Mapping[str, float]) -> dict[str, float]:
    """Phase durations as structured log fields (`<phase>_ms`)."""
    return {f"{name}_ms": round(ms, 2) for name, ms in phases_ms.items()}


class Undo:
    """Undo steps of a multi-step operation, run newest first when it fails; a step that fails
    is logged and the others still run."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], Awaitable[object] | object]] = []

    def push(self, step: Callable[[], Awaitable[object] | object]) -> None:
        self._steps.append(step)

    async def run(self) -> None:
        for step in reversed(self._steps):
            try:
                result = step()
                if asyncio.iscoroutine(result):
                    await asyncio.shield(result)
            except Exception:
                log.exception("cleanup step failed")
