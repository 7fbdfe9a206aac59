"""The gateway's Prometheus metrics, served at `/metrics` on its HTTP edge (routes/health.py):
every HTTP request counted by method and status and timed to its response's start (a stream's
body may flow for hours), the sandboxes of the cluster by state (its watched copy of
`sandboxes/`), and the creates sent again or abandoned after a node agent went away
(creates.py). gRPC requests are counted by the shared interceptor (aenv_common.metrics)."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aenv.cluster.v1 import cluster_pb2
from aenv_common.metrics import LATENCY_BUCKETS

HTTP_REQUESTS = Counter("aenv_http_requests", "HTTP requests, by method and status",
                        ["method", "status"])
HTTP_SECONDS = Histogram("aenv_http_request_seconds",
                         "Time to an HTTP request's response start", ["method"],
                         buckets=LATENCY_BUCKETS)
CREATE_RETRIES = Counter("aenv_gateway_create_retries",
                         "Creates sent again because the node agent did not answer")
CREATES_ABANDONED = Counter("aenv_gateway_creates_abandoned",
                            "Creates given up on, their sandbox killed once the node answers")


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request (websockets pass untimed)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method, started = scope.get("method", "GET"), time.perf_counter()
        status = "0"  # none sent: the app failed or the client went away first

        async def measured(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
                HTTP_SECONDS.labels(method).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self._app(scope, receive, measured)
        finally:
            HTTP_REQUESTS.labels(method, status).inc()


Records = Callable[[], list[cluster_pb2.SandboxRecord]]


class SandboxStates(Collector):
    """Sandboxes by state, from the gateway's watched records. One gateway runs per process;
    where tests run several, the first one started is reported."""

    def __init__(self) -> None:
        self._sources: list[Records] = []

    def attach(self, records: Records) -> None:
        self._sources.append(records)

    def detach(self, records: Records) -> None:
        if records in self._sources:  # a gateway may be stopped twice
            self._sources.remove(records)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("aenv_sandboxes", "Sandboxes of the cluster, by state",
                                   labels=["state"])
        if self._sources:
            states = Tally(cluster_pb2.SandboxState.Name(r.state) for r in self._sources[0]())
            for state in sorted(states):
                family.add_metric([state.removeprefix("SANDBOX_STATE_").lower()],
                                  float(states[state]))
        yield family


SANDBOX_STATES = SandboxStates()
REGISTRY.register(SANDBOX_STATES)
