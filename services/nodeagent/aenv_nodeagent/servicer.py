"""gRPC edge of the node agent (`aenv.nodeagent.v1.NodeAgentService`): thin over SandboxManager.
Typed errors become gRPC statuses in the shared interceptor."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv_nodeagent.sandboxes import SandboxManager


class NodeAgentServicer(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    def __init__(
        self, manager: SandboxManager, node_record: Callable[[], cluster_pb2.NodeRecord]
    ) -> None:
        self._manager = manager
        self._node_record = node_record

    async def CreateSandbox(
        self, request: nodeagent_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.CreateSandboxResponse:
        sandbox = await self._manager.create(request.spec)
        return nodeagent_pb2.CreateSandboxResponse(sandbox=sandbox.record)

    async def KillSandbox(
        self, request: nodeagent_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.KillSandboxResponse:
        await self._manager.kill(request.sandbox_id)
        return nodeagent_pb2.KillSandboxResponse()

    async def GetSandbox(
        self, request: nodeagent_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxResponse:
        return nodeagent_pb2.GetSandboxResponse(
            sandbox=self._manager.get(request.sandbox_id).record
        )

    async def ListSandboxes(
        self, request: nodeagent_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ListSandboxesResponse:
        return nodeagent_pb2.ListSandboxesResponse(
            sandboxes=[sbx.record for sbx in self._manager.all()]
        )

    async def SetSandboxTimeout(
        self, request: nodeagent_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.SetSandboxTimeoutResponse:
        record = await self._manager.set_timeout(request.sandbox_id, request.timeout_seconds)
        return nodeagent_pb2.SetSandboxTimeoutResponse(sandbox=record)

    async def GetNodeInfo(
        self, request: nodeagent_pb2.GetNodeInfoRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetNodeInfoResponse:
        return nodeagent_pb2.GetNodeInfoResponse(node=self._node_record())

    async def GetSandboxMetrics(
        self, request: nodeagent_pb2.GetSandboxMetricsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxMetricsResponse:
        metric = await self._manager.metrics(request.sandbox_id)
        return nodeagent_pb2.GetSandboxMetricsResponse(metrics=[metric])

    async def UpdateSandboxNetwork(
        self,
        request: nodeagent_pb2.UpdateSandboxNetworkRequest,
        context: grpc.aio.ServicerContext,
    ) -> nodeagent_pb2.UpdateSandboxNetworkResponse:
        record = await self._manager.update_network(request.sandbox_id, request.network)
        return nodeagent_pb2.UpdateSandboxNetworkResponse(sandbox=record)
