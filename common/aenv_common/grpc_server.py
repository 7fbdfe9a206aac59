"""gRPC server plumbing shared by the services: typed-error mapping, request metrics, health and
reflection."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from aenv_common.errors import AenvError
from aenv_common.metrics import GRPC_REQUESTS, GRPC_SECONDS
from aenv_common.retry_info import retry_metadata
from aenv_common.status_tables import grpc_status

log = logging.getLogger(__name__)

Registrar = Callable[[Any, grpc.aio.Server], None]


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A server interceptor that runs each call's handler, once found, wrapped in a behaviour
    of its own (`wrap`, usually through `wrap_handler`)."""

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


class ErrorMappingInterceptor(WrappingInterceptor):
    """Turns typed `AenvError`s raised by servicers into gRPC statuses, so servicers never deal
    with status codes themselves; counts and times every request by method and status."""

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        method = details.method
        return wrap_handler(handler, lambda fn, _: _wrap_unary(fn, method),
                            lambda fn, _: _wrap_stream(fn, method))


# A wrapper of a method's behaviour, told whether requests come as a stream.
Wrapper = Callable[[Any, bool], Any]
_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler, False, False),
          ("unary_stream", grpc.unary_stream_rpc_method_handler, False, True),
          ("stream_unary", grpc.stream_unary_rpc_method_handler, True, False),
          ("stream_stream", grpc.stream_stream_rpc_method_handler, True, True))


def wrap_handler(
    handler: grpc.RpcMethodHandler, answers_once: Wrapper, answers_stream: Wrapper
) -> grpc.RpcMethodHandler:
    """A server interceptor's handler: the method's behaviour wrapped by `answers_once` (unary
    responses) or `answers_stream` (server streams), whatever its kind."""
    for attribute, make, streamed_in, streamed_out in _KINDS:
        behaviour = getattr(handler, attribute)
        if behaviour is not None:
            wrapped = (answers_stream if streamed_out else answers_once)(behaviour, streamed_in)
            return make(wrapped, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler


def _wrap_unary(fn: Any, method: str) -> Any:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with _Measured(method, context) as measured:
            try:
                return await fn(request, context)
            except AenvError as err:
                measured.code = grpc_status(err).name
                await _abort(context, err)

    return wrapped


def _wrap_stream(fn: Any, method: str) -> Any:
    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with _Measured(method, context) as measured:
            try:
                async for item in fn(request, context):
                    yield item
            except AenvError as err:
                measured.code = grpc_status(err).name
                await _abort(context, err)

    return wrapped


async def _abort(context: grpc.aio.ServicerContext, err: AenvError) -> None:
    """Aborts the call with the error's status (and, when it says so, when to retry)."""
    code = grpc_status(err)
    retry_after_s = getattr(err, "retry_after_s", None)
    metadata = () if retry_after_s is None else retry_metadata(code, err.message, retry_after_s)
    await context.abort(code, err.message, (*metadata, *err.trailing_metadata()))


class _Measured:
    """One request's count (by its status) and time."""

    def __init__(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.method = method
        self.code = "OK"
        self._context = context
        self._started = 0.0

    def __enter__(self) -> _Measured:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.code == "OK" and kind is not None:
            # A servicer's own abort set the status; anything else escaped it.
            aborted = self._context.code()
            if aborted is not None:
                self.code = aborted.name
            elif issubclass(kind, asyncio.CancelledError):
                self.code = "CANCELLED"
            else:
                self.code = "UNKNOWN"
        GRPC_REQUESTS.labels(self.method, self.code).inc()
        GRPC_SECONDS.labels(self.method).observe(time.perf_counter() - self._started)


# gRPC cancels a request its server has not picked up within this long (core's default: 30 s).
# A server whose event loop is busy for that long (a node agent restoring 200 guests on two
# cores) would answer CANCELLED to calls it never saw, and a create would fail that a few
# seconds later would have run; every caller bounds its own wait with its deadline instead.
UNREQUESTED_OPTION = "grpc.server_max_unrequested_time_in_server"
UNREQUESTED_S = 3600


async def start_grpc_server(
    address: str,
    services: Iterable[tuple[Registrar, Any, str]],
    interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
) -> tuple[grpc.aio.Server, int]:
    """Starts a grpc.aio server with the given (add_X_to_server, servicer, full service name)
    triples plus health and reflection. Returns the server and the bound port. `interceptors`
    run inside the error mapping: a typed error they raise is mapped like a servicer's."""
    server = grpc.aio.server(interceptors=[ErrorMappingInterceptor(), *interceptors],
                             options=[(UNREQUESTED_OPTION, UNREQUESTED_S)])
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
