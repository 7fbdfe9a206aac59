"""Async client of the gateway's native gRPC API (`aenv.gateway.v1.GatewayService`).

    async with GatewayClient("127.0.0.1:50051", api_key) as client:
        results = await client.create_sandboxes("base", count=16, idempotency_key="step-7")
        sandboxes = [r for r in results if not isinstance(r, AenvError)]

One channel for the client's life; every call has a deadline (the client's default or its own
`timeout_s`); reads and creates are sent again when the gateway did not answer (creates always
carry an idempotency key, made up when none is given, so a retry never makes a second sandbox).
Errors are the typed errors of `aenv_client.errors`; a sandbox this client created that is gone
without it killing it raises SandboxDied.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_client.errors import AenvError, item_error, rpc_error
from aenv_client.retries import RetryPolicy, with_retries

API_KEY_METADATA = "x-api-key"
DEFAULT_TIMEOUT_S = 60.0

Reply = TypeVar("Reply")
# One batch item: its sandbox, or the typed error its create alone would have raised.
CreateOutcome = cluster_pb2.SandboxRecord | AenvError


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


class GatewayClient:
    def __init__(
        self, target: str, api_key: str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: RetryPolicy | None = None,
    ) -> None:
        self.target = target
        self._metadata = ((API_KEY_METADATA, api_key),)
        self._timeout_s = timeout_s
        self._retries = retries or RetryPolicy()
        self._channel = grpc.aio.insecure_channel(target)
        # Generated grpc stubs carry no annotations; the replies are typed where they are used.
        self._stub = gateway_pb2_grpc.GatewayServiceStub(self._channel)  # type: ignore[no-untyped-call]
        # Sandboxes this client made and has not killed: their NOT_FOUND is SandboxDied.
        self._alive: set[str] = set()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def create_sandbox(
        self, template_id: str, *, timeout_seconds: int = 0,
        env_vars: Mapping[str, str] | None = None, metadata: Mapping[str, str] | None = None,
        network: cluster_pb2.NetworkPolicy | None = None,
        lifecycle: cluster_pb2.Lifecycle | None = None,
        idempotency_key: str | None = None, timeout_s: float | None = None,
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.CreateSandboxRequest(
            template_id=template_id, timeout_seconds=timeout_seconds,
            env_vars=dict(env_vars or {}), metadata=dict(metadata or {}), network=network,
            lifecycle=lifecycle, idempotency_key=idempotency_key or new_idempotency_key(),
        )
        reply: gateway_pb2.CreateSandboxResponse = await self._call(
            self._stub.CreateSandbox, request, timeout_s, retry=True)
        self._alive.add(reply.sandbox.sandbox_id)
        return reply.sandbox

    async def create_sandboxes(
        self, template_id: str = "", *, count: int = 0,
        items: list[gateway_pb2.CreateSandboxRequest] | None = None, timeout_seconds: int = 0,
        env_vars: Mapping[str, str] | None = None, metadata: Mapping[str, str] | None = None,
        network: cluster_pb2.NetworkPolicy | None = None,
        lifecycle: cluster_pb2.Lifecycle | None = None,
        idempotency_key: str | None = None, timeout_s: float | None = None,
    ) -> list[CreateOutcome]:
        """`count` sandboxes of one spec, or one per item (its fields over the shared ones);
        one outcome per sandbox, in order. Sent again with the same idempotency key, the batch
        answers the sandboxes already made and creates only the items that failed."""
        request = gateway_pb2.CreateSandboxesRequest(
            template_id=template_id, count=count, items=items or [],
            timeout_seconds=timeout_seconds, env_vars=dict(env_vars or {}),
            metadata=dict(metadata or {}), network=network, lifecycle=lifecycle,
            idempotency_key=idempotency_key or new_idempotency_key(),
        )
        reply: gateway_pb2.CreateSandboxesResponse = await self._call(
            self._stub.CreateSandboxes, request, timeout_s, retry=True)
        outcomes = [_outcome(result) for result in reply.results]
        self._alive.update(o.sandbox_id for o in outcomes if not isinstance(o, AenvError))
        return outcomes

    async def get_sandbox(
        self, sandbox_id: str, *, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.GetSandboxRequest(sandbox_id=sandbox_id)
        reply: gateway_pb2.GetSandboxResponse = await self._call(
            self._stub.GetSandbox, request, timeout_s, retry=True, sandbox_id=sandbox_id)
        return reply.sandbox

    async def list_sandboxes(
        self, metadata: Mapping[str, str] | None = None, *, timeout_s: float | None = None
    ) -> list[cluster_pb2.SandboxRecord]:
        request = gateway_pb2.ListSandboxesRequest(metadata=dict(metadata or {}))
        reply: gateway_pb2.ListSandboxesResponse = await self._call(
            self._stub.ListSandboxes, request, timeout_s, retry=True)
        return list(reply.sandboxes)

    async def kill_sandbox(self, sandbox_id: str, *, timeout_s: float | None = None) -> None:
        request = gateway_pb2.KillSandboxRequest(sandbox_id=sandbox_id)
        try:
            await self._call(self._stub.KillSandbox, request, timeout_s, sandbox_id=sandbox_id)
        finally:
            self._alive.discard(sandbox_id)

    async def pause_sandbox(
        self, sandbox_id: str, *, filesystem_only: bool = False, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.PauseSandboxRequest(
            sandbox_id=sandbox_id, filesystem_only=filesystem_only)
        reply: gateway_pb2.PauseSandboxResponse = await self._call(
            self._stub.PauseSandbox, request, timeout_s, sandbox_id=sandbox_id)
        return reply.sandbox

    async def resume_sandbox(
        self, sandbox_id: str, *, timeout_seconds: int = 0, reboot: bool = False,
        timeout_s: float | None = None,
    ) -> gateway_pb2.ResumeSandboxResponse:
        """`resumed` in the reply is False when the sandbox was already running."""
        request = gateway_pb2.ResumeSandboxRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_seconds, reboot=reboot)
        reply: gateway_pb2.ResumeSandboxResponse = await self._call(
            self._stub.ResumeSandbox, request, timeout_s, sandbox_id=sandbox_id)
        return reply

    async def create_snapshot(
        self, sandbox_id: str, name: str = "", *, filesystem_only: bool = False,
        timeout_s: float | None = None,
    ) -> cluster_pb2.SnapshotRecord:
        request = gateway_pb2.CreateSnapshotRequest(
            sandbox_id=sandbox_id, name=name, filesystem_only=filesystem_only)
        reply: gateway_pb2.CreateSnapshotResponse = await self._call(
            self._stub.CreateSnapshot, request, timeout_s, sandbox_id=sandbox_id)
        return reply.snapshot

    async def list_snapshots(
        self, *, sandbox_id: str = "", name: str = "", limit: int = 0, page_token: str = "",
        timeout_s: float | None = None,
    ) -> gateway_pb2.ListSnapshotsResponse:
        request = gateway_pb2.ListSnapshotsRequest(
            sandbox_id=sandbox_id, name=name, limit=limit, page_token=page_token)
        reply: gateway_pb2.ListSnapshotsResponse = await self._call(
            self._stub.ListSnapshots, request, timeout_s, retry=True)
        return reply

    async def delete_snapshot(self, snapshot_id: str, *, timeout_s: float | None = None) -> None:
        request = gateway_pb2.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        await self._call(self._stub.DeleteSnapshot, request, timeout_s)

    async def fork_sandbox(
        self, sandbox_id: str, count: int = 1, *, timeout_seconds: int = 0,
        timeout_s: float | None = None,
    ) -> list[gateway_pb2.ForkResult]:
        request = gateway_pb2.ForkSandboxRequest(
            sandbox_id=sandbox_id, count=count, timeout_seconds=timeout_seconds)
        reply: gateway_pb2.ForkSandboxResponse = await self._call(
            self._stub.ForkSandbox, request, timeout_s, sandbox_id=sandbox_id)
        self._alive.update(r.sandbox.sandbox_id for r in reply.results if r.HasField("sandbox"))
        return list(reply.results)

    async def reset_sandbox(
        self, sandbox_id: str, snapshot_id: str, *, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.ResetSandboxRequest(sandbox_id=sandbox_id, snapshot_id=snapshot_id)
        reply: gateway_pb2.ResetSandboxResponse = await self._call(
            self._stub.ResetSandbox, request, timeout_s, sandbox_id=sandbox_id)
        return reply.sandbox

    async def _call(
        self, method: Callable[..., Awaitable[Reply]], request: Any, timeout_s: float | None,
        *, retry: bool = False, sandbox_id: str = "",
    ) -> Reply:
        """`method(request)` within the deadline; sent again only when `retry` says it is safe.
        A NOT_FOUND of `sandbox_id`, a sandbox this client made, is SandboxDied."""
        async def attempt(remaining_s: float) -> Reply:
            return await method(request, metadata=self._metadata, timeout=remaining_s)

        timeout = self._timeout_s if timeout_s is None else timeout_s
        policy = self._retries if retry else RetryPolicy(attempts=1)
        try:
            return await with_retries(attempt, policy, timeout)
        except grpc.aio.AioRpcError as err:
            died = bool(sandbox_id) and sandbox_id in self._alive
            typed = rpc_error(err, sandbox_died=died)
            if died and err.code() == grpc.StatusCode.NOT_FOUND:
                self._alive.discard(sandbox_id)
            raise typed from err


def _outcome(result: gateway_pb2.CreateResult) -> CreateOutcome:
    if result.HasField("sandbox"):
        return result.sandbox
    return item_error(result.error)
