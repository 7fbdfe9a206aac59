"""The gateway connection every call goes through: one channel for the client's life, the API
key on every call, a deadline on each (the client's default or the call's own `timeout_s`), sends
repeated only where that is safe, and gRPC failures turned into the typed errors of
`aenv_client.errors`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_client.errors import AenvError, NotFound, rpc_error
from aenv_client.retries import RetryPolicy, with_retries

API_KEY_METADATA = "x-api-key"
DEFAULT_TIMEOUT_S = 60.0

Reply = TypeVar("Reply")


class Connection:
    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
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

    async def __aenter__(self) -> Self:
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


    async def get_sandbox(
        self, sandbox_id: str, *, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.GetSandboxRequest(sandbox_id=sandbox_id)
        reply: gateway_pb2.GetSandboxResponse = await self._call(
            self._stub.GetSandbox, request, timeout_s, retry=True, sandbox_id=sandbox_id
        )
        return reply.sandbox


    def _deadline(self, timeout_s: float | None) -> float:
        return self._timeout_s if timeout_s is None else timeout_s

    async def _guest_error(self, err: grpc.aio.AioRpcError, sandbox_id: str) -> AenvError:
        """A failed call into a sandbox: its NOT_FOUND may name a path, not the sandbox, so the
        sandbox is asked for: SandboxDied when it was this client's and is gone."""
        typed = rpc_error(err)
        if not isinstance(typed, NotFound):
            return typed
        try:
            await self.get_sandbox(sandbox_id)
        except NotFound as gone:
            return gone
        return typed

    async def _call(
        self,
        method: Callable[..., Awaitable[Reply]],
        request: Any,
        timeout_s: float | None,
        *,
        retry: bool = False,
        sandbox_id: str = "",
    ) -> Reply:
        """`method(request)` within the deadline; sent again only when `retry` says it is safe.
        A NOT_FOUND of `sandbox_id`, a sandbox this client made, is SandboxDied."""

        async def attempt(remaining_s: float) -> Reply:
            return await method(request, metadata=self._metadata, timeout=remaining_s)

        timeout = self._deadline(timeout_s)
        policy = self._retries if retry else RetryPolicy(attempts=1)
        try:
            return await with_retries(attempt, policy, timeout)
        except grpc.aio.AioRpcError as err:
            died = bool(sandbox_id) and sandbox_id in self._alive
            typed = rpc_error(err, sandbox_died=died)
            if died and err.code() == grpc.StatusCode.NOT_FOUND:
                self._alive.discard(sandbox_id)
            raise typed from err

