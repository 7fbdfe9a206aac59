"""Native gRPC API (aenv.gateway.v1.GatewayService): a thin edge over SandboxService, with the
same API key as REST, presented as `x-api-key` metadata."""

from __future__ import annotations

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.auth import ApiKeyAuth
from aenv_gateway.service import CreateRequest, ListQuery, SandboxService

SERVICE_NAME = "aenv.gateway.v1.GatewayService"


def _api_key(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "x-api-key":
            return value if isinstance(value, str) else value.decode()
    return None


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, service: SandboxService, auth: ApiKeyAuth, default_timeout_s: int) -> None:
        self._service = service
        self._auth = auth
        self._default_timeout = default_timeout_s

    async def CreateSandbox(
        self, request: gateway_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxResponse:
        self._auth.check(_api_key(context))
        create = CreateRequest(
            template_id=request.template_id,
            timeout_s=request.timeout_seconds or self._default_timeout,
            env_vars=dict(request.env_vars),
            metadata=dict(request.metadata),
            network=request.network
            if request.HasField("network")
            else cluster_pb2.NetworkPolicy(allow_internet_access=True),
            lifecycle=request.lifecycle,
        )
        record = await self._service.create(create)
        return gateway_pb2.CreateSandboxResponse(sandbox=record)

    async def GetSandbox(
        self, request: gateway_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxResponse:
        self._auth.check(_api_key(context))
        return gateway_pb2.GetSandboxResponse(sandbox=await self._service.get(request.sandbox_id))

    async def ListSandboxes(
        self, request: gateway_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSandboxesResponse:
        self._auth.check(_api_key(context))
        page = self._service.list(ListQuery(metadata=dict(request.metadata)))
        return gateway_pb2.ListSandboxesResponse(sandboxes=page.items)

    async def KillSandbox(
        self, request: gateway_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxResponse:
        self._auth.check(_api_key(context))
        await self._service.kill(request.sandbox_id)
        return gateway_pb2.KillSandboxResponse()
