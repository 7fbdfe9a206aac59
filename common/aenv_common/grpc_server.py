"""gRPC server plumbing shared by the services: typed-error mapping, health and reflection."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from aenv_common.errors import AenvError

log = logging.getLogger(__name__)

Registrar = Callable[[Any, grpc.aio.Server], None]


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Turns typed `AenvError`s raised by servicers into gRPC statuses, so servicers never deal
    with status codes themselves."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_unary(handler.stream_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler


def _wrap_unary(fn: Any) -> Any:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(request, context)
        except AenvError as err:
            await context.abort(err.grpc_code, err.message)

    return wrapped


def _wrap_stream(fn: Any) -> Any:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for item in fn(request, context):
                yield item
        except AenvError as err:
            await context.abort(err.grpc_code, err.message)

    return wrapped


async def start_grpc_server(
    address: str,
    services: Iterable[tuple[Registrar, Any, str]],
) -> tuple[grpc.aio.Server, int]:
    """Starts a grpc.aio server with the given (add_X_to_server, servicer, full service name)
    triples plus health and reflection. Returns the server and the bound port."""
    server = grpc.aio.server(interceptors=[ErrorMappingInterceptor()])
    names = [reflection.SERVICE_NAME, health.SERVICE_NAME]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for register, servicer, name in services:
        register(servicer, server)
        names.append(name)
    reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port(address)
    await server.start()
    for name in names:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("grpc server started", extra={"address": address, "port": port})
    return server, port
