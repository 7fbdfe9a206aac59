"""The gRPC edge's one door: every call of the gateway's service is authenticated by its
`x-api-key` metadata and runs held by its key for its whole life (keys/open_requests.py). A key
revoked cuts every call it has in flight (UNAUTHENTICATED, unary calls too) and each call counts
against the key's cap (RESOURCE_EXHAUSTED past it). Methods never check keys themselves: they
read the caller with `current_caller()`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc

from aenv_common.grpc_server import WrappingInterceptor, wrap_handler
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.keys.open_requests import OpenRequests

Metadata = Sequence[tuple[str, str | bytes]] | None


def api_key_of(metadata: Metadata) -> str | None:
    for key, value in metadata or ():
        if key == "x-api-key":
            return value if isinstance(value, str) else value.decode()
    return None


class KeyHoldingInterceptor(WrappingInterceptor):
    """Authenticates and holds every call of the service named `service`."""

    def __init__(self, auth: ApiKeyAuth, requests: OpenRequests, service: str) -> None:
        self._auth = auth
        self._requests = requests
        self._prefix = f"/{service}/"

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if not details.method.startswith(self._prefix):
            return handler  # health and reflection are open to all
        presented = api_key_of(details.invocation_metadata)
        return wrap_handler(handler, lambda fn, _: self._unary(fn, presented),
                            lambda fn, _: self._stream(fn, presented))

    @asynccontextmanager
    async def _held(self, presented: str | None) -> AsyncIterator[None]:
        """Runs the body as the call of the presented key, in the call's own task (so its
        context holds the caller and revocation cancels exactly it).

        :raise Unauthenticated: no valid key, or revoked while the body ran.
        :raise ResourceExhausted: the key holds its cap of open calls already."""
        async with self._requests.held(self._auth.check(presented)):
            yield

    def _unary(self, behaviour: Any, presented: str | None) -> Any:
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with self._held(presented):
                return await behaviour(request, context)

        return wrapped

    def _stream(self, behaviour: Any, presented: str | None) -> Any:
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with self._held(presented):
                async for response in behaviour(request, context):
                    yield response

        return wrapped
