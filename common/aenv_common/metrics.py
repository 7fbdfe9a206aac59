"""Prometheus metrics every service shares: the latency buckets, the gRPC servers' request
metrics (recorded by the shared interceptor, grpc_server.py), and `/metrics` over HTTP on a port
of its own for the services that serve only gRPC (the gateway serves it on its HTTP edge).

Each service adds its own metrics beside these, in its own module; all go to the process's
default registry."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

log = logging.getLogger(__name__)

# From a millisecond (an RPC answered from memory) to two minutes (a create under TCG).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0)

GRPC_REQUESTS = Counter(
    "aenv_grpc_requests", "gRPC requests served, by method and status code", ["method", "code"])
GRPC_SECONDS = Histogram(
    "aenv_grpc_request_seconds", "Time to serve a gRPC request (a stream: until it ends)",
    ["method"], buckets=LATENCY_BUCKETS)


@dataclass
class MetricsEndpoint:
    """`/metrics` over HTTP, served on the service's event loop: collectors read the service's
    state between its steps, never while another thread changes it."""

    port: int
    _runner: web.AppRunner

    @classmethod
    async def start(cls, listen: str) -> MetricsEndpoint:
        """Listens on `host:port` (port 0: any free one, see `port`)."""
        host, _, port = listen.rpartition(":")
        app = web.Application()
        app.router.add_get("/metrics", _exposition)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port))
        await site.start()
        bound = int(runner.addresses[0][1])
        log.info("metrics endpoint started", extra={"address": listen, "port": bound})
        return cls(bound, runner)

    async def stop(self) -> None:
        await self._runner.cleanup()


CONTENT_TYPE = CONTENT_TYPE_LATEST


async def _exposition(_: web.Request) -> web.Response:
    return web.Response(body=exposition(), headers={"Content-Type": CONTENT_TYPE})


def exposition() -> bytes:
    """Every metric of this process in Prometheus' text format."""
    return generate_latest(REGISTRY)
