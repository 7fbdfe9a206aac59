"""The gRPC edge's part of death certificates: an interceptor that passes every NotFound of a
method naming a sandbox through `Deaths.explain`, so each method, present and future, answers a
dead sandbox with NOT_FOUND, its certificate's words and `aenv-death-cause` trailing metadata
(the error mapping outside it sends SandboxDied's trailing metadata).

A request names its sandbox in `sandbox_id`, or in its first message's `start` (Exec, PutFile)
or `file` (GetFile).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import Message

from aenv_common.errors import NotFound
from aenv_common.grpc_server import WrappingInterceptor, wrap_handler
from aenv_gateway.core.events.deaths import Deaths


def sandbox_id_of(request: Any) -> str:
    if not isinstance(request, Message):
        return ""
    fields = request.DESCRIPTOR.fields_by_name
    if "sandbox_id" in fields:
        return str(request.sandbox_id)
    for name in ("start", "file"):
        if name in fields and request.HasField(name):
            return sandbox_id_of(getattr(request, name))
    return ""


class _FirstNamed:
    """A request stream that remembers the sandbox its first message names."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.sandbox_id = ""

    def __aiter__(self) -> _FirstNamed:
        return self

    async def __anext__(self) -> Any:
        request = await self._requests.__anext__()
        self.sandbox_id = self.sandbox_id or sandbox_id_of(request)
        return request


class DeathsInterceptor(WrappingInterceptor):
    def __init__(self, deaths: Deaths) -> None:
        self._deaths = deaths

    def wrap(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        return wrap_handler(handler, self._unary, self._stream)

    def _unary(self, behaviour: Any, streamed_in: bool) -> Any:
        deaths = self._deaths

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            named = _FirstNamed(request) if streamed_in else None
            try:
                return await behaviour(named or request, context)
            except NotFound as err:
                raise await deaths.explain(
                    named.sandbox_id if named else sandbox_id_of(request), err) from err

        return wrapped

    def _stream(self, behaviour: Any, streamed_in: bool) -> Any:
        deaths = self._deaths

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            named = _FirstNamed(request) if streamed_in else None
            try:
                async for response in behaviour(named or request, context):
                    yield response
            except NotFound as err:
                raise await deaths.explain(
                    named.sandbox_id if named else sandbox_id_of(request), err) from err

        return wrapped
