"""The shape both of the gateway's own server interceptors share: each call's handler, once
found, wrapped in a behaviour of the interceptor's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        return self.wrap(handler, handler_call_details)

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """The handler to run instead of `handler` (unknown methods never get here)."""
        raise NotImplementedError
