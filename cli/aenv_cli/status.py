"""`aenv status`: is each service up, what does the node report, how many sandboxes run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv_cli.client import GatewayClient
from aenv_cli.homelock import lock_holder
from aenv_cli.ports import PlatformPorts, address
from aenv_cli.services import default_service_table
from aenv_cli.state import load_ports
from aenv_common.errors import AenvError
from aenv_common.status_tables import from_rpc_error

RPC_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServiceHealth:
    name: str
    probe: str
    up: bool


@dataclass(frozen=True)
class PlatformStatus:
    home: Path
    launcher_pid: int | None
    services: list[ServiceHealth]
    node: cluster_pb2.NodeRecord | None
    node_error: str | None
    sandbox_count: int | None
    sandboxes_error: str | None


async def collect_status(home: Path) -> PlatformStatus:
    ports = load_ports(home)
    services, (node, node_error), (count, count_error) = await asyncio.gather(
        _service_health(home, ports),
        _node_info(ports),
        _sandbox_count(home),
    )
    return PlatformStatus(
        home=home,
        launcher_pid=lock_holder(home),
        services=services,
        node=node,
        node_error=node_error,
        sandbox_count=count,
        sandboxes_error=count_error,
    )


async def _service_health(home: Path, ports: PlatformPorts) -> list[ServiceHealth]:
    table = default_service_table(home, ports)
    states = await asyncio.gather(*(spec.probe.ready() for spec in table))
    return [
        ServiceHealth(spec.name, spec.probe.describe(), up)
        for spec, up in zip(table, states, strict=True)
    ]


async def _node_info(ports: PlatformPorts) -> tuple[cluster_pb2.NodeRecord | None, str | None]:
    async with grpc.aio.insecure_channel(address(ports.nodeagent)) as channel:
        stub = nodeagent_pb2_grpc.NodeAgentServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            reply: nodeagent_pb2.GetNodeInfoResponse = await stub.GetNodeInfo(
                nodeagent_pb2.GetNodeInfoRequest(), timeout=RPC_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as err:
            return None, from_rpc_error(err).message
    return reply.node, None


async def _sandbox_count(home: Path) -> tuple[int | None, str | None]:
    try:
        client = GatewayClient.for_home(home, timeout_s=RPC_TIMEOUT_S)
    except FileNotFoundError:
        return None, "no API key (platform never started here)"
    async with client:
        try:
            return len(await client.list_sandboxes()), None
        except AenvError as err:
            return None, err.message
