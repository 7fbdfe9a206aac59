"""Readiness probes: is a started process serving yet?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

PROBE_TIMEOUT_S = 1.0


class Probe(Protocol):
    async def ready(self) -> bool: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class GrpcHealthProbe:
    """grpc.health.v1 `Check` of the server as a whole (service name "")."""

    address: str

    async def ready(self) -> bool:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
            except grpc.aio.AioRpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def describe(self) -> str:
        return f"grpc health {self.address}"


@dataclass(frozen=True)
class HttpHealthProbe:
    """HTTP GET answering 200 (the gateway's and etcd's `/health`)."""

    url: str

    async def ready(self) -> bool:
        # trust_env=False: a proxy from the environment must never see loopback probes.
        async with httpx.AsyncClient(trust_env=False, timeout=PROBE_TIMEOUT_S) as client:
            try:
                response = await client.get(self.url)
            except httpx.HTTPError:
                return False
        return response.status_code == 200

    def describe(self) -> str:
        return f"GET {self.url}"
