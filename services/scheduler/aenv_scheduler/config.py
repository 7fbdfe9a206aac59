"""The scheduler's settings, read from `AENV_SCHEDULER_*` (and `AENV_*` for the common part)."""

from __future__ import annotations

import os
import socket

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from aenv_common.config import CommonSettings


def default_instance_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_SCHEDULER_", extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    listen: str = "127.0.0.1:50051"
    # Prometheus /metrics over HTTP (host:port); unset: not served.
    metrics_listen: str | None = None
    # Identity written into the leader key (which instance is active).
    instance_id: str = Field(default_factory=default_instance_id)
    # A request that cannot be placed now waits this long for capacity before
    # RESOURCE_EXHAUSTED (capped by the caller's gRPC deadline).
    queue_wait_seconds: float = 30.0
    # Requests waiting at once; beyond this, RESOURCE_EXHAUSTED at once.
    max_queued: int = 100_000
    # What a request refused by a full queue or after its wait is told: try again this much
    # later (gRPC RetryInfo; HTTP Retry-After at the gateway).
    retry_after_seconds: float = Field(default=5.0, gt=0)
    # A placement holds its resources on the node until the node's record accounts for the
    # sandbox, or for this long if the sandbox never appears (creation failed).
    reservation_ttl_seconds: float = 60.0
    # Resources of a sandbox whose spec and template give none.
    default_vcpus: int = 1
    default_memory_mib: int = 512
    # Leader key lease: a dead leader is replaced within about this long.
    leader_ttl_seconds: int = 5
    # How often the leader looks for sandboxes of dead nodes.
    sweep_interval_seconds: float = 5.0
