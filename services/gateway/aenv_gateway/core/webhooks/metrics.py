"""The webhooks' Prometheus metrics (on the gateway's `/metrics`): every attempt by outcome and
its time, every event by how its delivery ended, and how long after the event it arrived."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.metrics import LATENCY_BUCKETS
from aenv_gateway.core.webhooks.sender import Attempt

ATTEMPTS = Counter("aenv_webhook_attempts", "Webhook delivery attempts, by outcome",
                   ["outcome"])
ATTEMPT_SECONDS = Histogram("aenv_webhook_attempt_seconds",
                            "Time of one webhook delivery attempt", buckets=LATENCY_BUCKETS)
DELIVERIES = Counter("aenv_webhook_deliveries",
                     "Events sent to webhooks, by how their delivery ended", ["outcome"])
DELIVERY_LAG = Histogram("aenv_webhook_delivery_lag_seconds",
                         "From an event to its delivery's end (acknowledged or given up)",
                         buckets=(*LATENCY_BUCKETS, 300.0, 1800.0, 3600.0))


def attempted(attempt: Attempt) -> None:
    ATTEMPTS.labels("delivered" if attempt.delivered else "failed").inc()
    ATTEMPT_SECONDS.observe(attempt.seconds)


def finished(event: c.SandboxEvent, outcome: str) -> None:
    DELIVERIES.labels(outcome).inc()
    if event.HasField("time"):
        DELIVERY_LAG.observe(max(0.0, time.time() - event.time.ToNanoseconds() / 1e9))
