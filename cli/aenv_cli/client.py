"""Python client of the gateway's native gRPC API (`aenv.gateway.v1.GatewayService`).

    async with GatewayClient.for_home(Path("~/.aenv").expanduser()) as client:
        sandbox = await client.create_sandbox("base")
        await client.kill_sandbox(sandbox.sandbox_id)

Errors arrive as the typed `aenv_common.errors` exceptions (NotFound, Unauthenticated, ...).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_cli.files import read_api_key
from aenv_cli.ports import address
from aenv_cli.state import load_ports
from aenv_common.errors import from_rpc_error

API_KEY_METADATA = "x-api-key"
DEFAULT_TIMEOUT_S = 60.0

Reply = TypeVar("Reply")


class GatewayClient:
    def __init__(self, target: str, api_key: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        self._metadata = ((API_KEY_METADATA, api_key),)
        self._timeout_s = timeout_s
        self._channel = grpc.aio.insecure_channel(target)
        # Generated grpc stubs carry no annotations; the replies are typed where they are used.
        self._stub = gateway_pb2_grpc.GatewayServiceStub(self._channel)  # type: ignore[no-untyped-call]

    @classmethod
    def for_home(cls, home: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GatewayClient:
        """The platform started by `aenv up --home home`: its gRPC port and generated key."""
        target = address(load_ports(home).gateway_grpc)
        return cls(target, read_api_key(home), timeout_s=timeout_s)

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def create_sandbox(
        self,
        template_id: str,
        *,
        timeout_seconds: int = 0,
        env_vars: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        network: cluster_pb2.NetworkPolicy | None = None,
        lifecycle: cluster_pb2.Lifecycle | None = None,
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.CreateSandboxRequest(
            template_id=template_id,
            timeout_seconds=timeout_seconds,
            env_vars=dict(env_vars or {}),
            metadata=dict(metadata or {}),
            network=network,
            lifecycle=lifecycle,
        )
        reply: gateway_pb2.CreateSandboxResponse = await self._call(
            self._stub.CreateSandbox, request
        )
        return reply.sandbox

    async def get_sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.GetSandboxRequest(sandbox_id=sandbox_id)
        reply: gateway_pb2.GetSandboxResponse = await self._call(self._stub.GetSandbox, request)
        return reply.sandbox

    async def list_sandboxes(
        self, metadata: Mapping[str, str] | None = None
    ) -> list[cluster_pb2.SandboxRecord]:
        request = gateway_pb2.ListSandboxesRequest(metadata=dict(metadata or {}))
        reply: gateway_pb2.ListSandboxesResponse = await self._call(
            self._stub.ListSandboxes, request
        )
        return list(reply.sandboxes)

    async def kill_sandbox(self, sandbox_id: str) -> None:
        request = gateway_pb2.KillSandboxRequest(sandbox_id=sandbox_id)
        await self._call(self._stub.KillSandbox, request)

    async def pause_sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.PauseSandboxRequest(sandbox_id=sandbox_id)
        reply: gateway_pb2.PauseSandboxResponse = await self._call(
            self._stub.PauseSandbox, request
        )
        return reply.sandbox

    async def resume_sandbox(
        self, sandbox_id: str, *, timeout_seconds: int = 0
    ) -> gateway_pb2.ResumeSandboxResponse:
        """`resumed` in the reply is False when the sandbox was already running."""
        request = gateway_pb2.ResumeSandboxRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_seconds
        )
        reply: gateway_pb2.ResumeSandboxResponse = await self._call(
            self._stub.ResumeSandbox, request
        )
        return reply

    async def create_snapshot(
        self, sandbox_id: str, name: str = ""
    ) -> cluster_pb2.SnapshotRecord:
        request = gateway_pb2.CreateSnapshotRequest(sandbox_id=sandbox_id, name=name)
        reply: gateway_pb2.CreateSnapshotResponse = await self._call(
            self._stub.CreateSnapshot, request
        )
        return reply.snapshot

    async def list_snapshots(
        self, *, sandbox_id: str = "", name: str = "", limit: int = 0, page_token: str = ""
    ) -> gateway_pb2.ListSnapshotsResponse:
        request = gateway_pb2.ListSnapshotsRequest(
            sandbox_id=sandbox_id, name=name, limit=limit, page_token=page_token
        )
        reply: gateway_pb2.ListSnapshotsResponse = await self._call(
            self._stub.ListSnapshots, request
        )
        return reply

    async def delete_snapshot(self, snapshot_id: str) -> None:
        request = gateway_pb2.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        await self._call(self._stub.DeleteSnapshot, request)

    async def fork_sandbox(
        self, sandbox_id: str, count: int = 1, *, timeout_seconds: int = 0
    ) -> list[gateway_pb2.ForkResult]:
        request = gateway_pb2.ForkSandboxRequest(
            sandbox_id=sandbox_id, count=count, timeout_seconds=timeout_seconds
        )
        reply: gateway_pb2.ForkSandboxResponse = await self._call(
            self._stub.ForkSandbox, request
        )
        return list(reply.results)

    async def reset_sandbox(self, sandbox_id: str, snapshot_id: str) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.ResetSandboxRequest(sandbox_id=sandbox_id, snapshot_id=snapshot_id)
        reply: gateway_pb2.ResetSandboxResponse = await self._call(
            self._stub.ResetSandbox, request
        )
        return reply.sandbox

    async def _call(self, method: Callable[..., Awaitable[Reply]], request: object) -> Reply:
        try:
            return await method(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
