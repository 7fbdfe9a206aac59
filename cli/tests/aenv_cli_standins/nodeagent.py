"""`python -m aenv_cli_standins.nodeagent`: answers NodeAgentService/GetNodeInfo (fixed node)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv_cli_standins.common import record_environment, until_sigterm
from aenv_common.grpc_server import start_grpc_server


class NodeInfo(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    async def GetNodeInfo(
        self, request: nodeagent_pb2.GetNodeInfoRequest, context: Any
    ) -> nodeagent_pb2.GetNodeInfoResponse:
        node = cluster_pb2.NodeRecord(
            node_id="standin-node",
            nodeagent_address=os.environ["AENV_NODEAGENT_LISTEN"],
            accelerator="tcg",
            kernel_version="6.1.0-standin",
            confinement="cgroup v1 (cpu, memory, pids)",
            sandbox_count=2,
            capacity=cluster_pb2.Resources(vcpus=2, memory_mib=4096),
            cached_templates=["base"],
        )
        return nodeagent_pb2.GetNodeInfoResponse(node=node)


async def main() -> None:
    record_environment("nodeagent")
    server, _ = await start_grpc_server(
        os.environ["AENV_NODEAGENT_LISTEN"],
        [
            (
                nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server,
                NodeInfo(),
                "aenv.nodeagent.v1.NodeAgentService",
            )
        ],
    )
    await until_sigterm()
    await server.stop(grace=1)


if __name__ == "__main__":
    asyncio.run(main())
