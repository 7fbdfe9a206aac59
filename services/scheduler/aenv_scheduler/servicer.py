"""gRPC face of the scheduler: `aenv.scheduler.v1.SchedulerService`."""

from __future__ import annotations

import grpc

from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.rollout import tag_current_span
from aenv_scheduler.scheduler import Scheduler

# Answer a little before the caller's deadline, so it gets RESOURCE_EXHAUSTED, not a timeout.
DEADLINE_MARGIN_SECONDS = 0.05


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, scheduler: Scheduler, queue_wait_seconds: float) -> None:
        self._scheduler = scheduler
        self._queue_wait = queue_wait_seconds

    async def Schedule(
        self, request: scheduler_pb2.ScheduleRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ScheduleResponse:
        tag_current_span(request.spec)  # a span of the sandbox's rollout
        wait = self._queue_wait
        remaining = context.time_remaining()
        if remaining is not None:
            wait = max(0.0, min(wait, remaining - DEADLINE_MARGIN_SECONDS))
        placement = await self._scheduler.schedule(request.spec, wait)
        return scheduler_pb2.ScheduleResponse(placement=placement)
