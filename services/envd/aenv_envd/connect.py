"""Server side of the Connect protocol (JSON and binary codecs) as a set of starlette endpoints.

Kept in-house instead of the connectrpc server so every wire detail the E2B SDKs depend on is
explicit: exact streaming content types, one end-stream envelope, exactly one message for
client-streaming replies, and error code -> HTTP status.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .errors import EnvdError
from .status_table import http_status

log = logging.getLogger(__name__)

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
DEFAULT_KEEPALIVE_S = 90.0

ReqT = TypeVar("ReqT", bound=Message)
RespT = TypeVar("RespT", bound=Message)


# ----- codecs ---------------------------------------------------------------------------------


class Preencoded(abc.ABC):
    """A response message that encodes itself, for hot paths (command output): building protobuf
    objects copies every bytes field twice and json_format walks them in Python, which under
    emulation costs more than the bytes themselves."""

    __slots__ = ()

    @abc.abstractmethod
    def envelope(self, binary: bool) -> bytes | bytearray:
        """The whole data envelope (flags, length, payload) in the given codec."""


class Codec:
    """proto3-JSON or binary protobuf encoding of single messages."""

    def __init__(self, binary: bool) -> None:
        self.binary = binary

    def encode(self, message: Message) -> bytes:
        if self.binary:
            return bytes(message.SerializeToString())
        as_dict = json_format.MessageToDict(message, preserving_proto_field_name=False)
        return json.dumps(as_dict, separators=(",", ":")).encode()

    def frame(self, message: Message | Preencoded) -> bytes | memoryview:
        """One data envelope, as starlette's StreamingResponse takes it."""
        if not isinstance(message, Preencoded):
            return encode_envelope(0, self.encode(message))
        envelope = message.envelope(self.binary)
        return envelope if isinstance(envelope, bytes) else memoryview(envelope)

    def decode(self, payload: bytes, message_type: type[ReqT]) -> ReqT:
        message = message_type()
        try:
            if self.binary:
                message.ParseFromString(payload)
            else:
                json_format.Parse(payload or b"{}", message, ignore_unknown_fields=True)
        except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
            raise EnvdError("invalid_argument", f"cannot decode request: {exc}") from exc
        return cast(ReqT, message)


UNARY_CODECS = {"application/json": Codec(binary=False), "application/proto": Codec(binary=True)}
STREAM_CODECS = {
    "application/connect+json": Codec(binary=False),
    "application/connect+proto": Codec(binary=True),
}


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


# ----- envelopes ------------------------------------------------------------------------------


def encode_envelope(flags: int, payload: bytes) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def end_stream_payload(error: EnvdError | None) -> bytes:
    if error is None:
        return b"{}"
    body = {"error": {"code": error.code, "message": error.message}}
    return json.dumps(body, separators=(",", ":")).encode()


class EnvelopeReader:
    """Incremental parser: feed request body chunks, get complete (flags, payload) envelopes."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        self._buffer += chunk
        envelopes: list[tuple[int, bytes]] = []
        while len(self._buffer) >= 5:
            flags, length = struct.unpack_from(">BI", self._buffer)
            if length > MAX_MESSAGE_BYTES:
                raise EnvdError("resource_exhausted", f"message of {length} bytes is too large")
            if len(self._buffer) < 5 + length:
                break
            payload = bytes(self._buffer[5 : 5 + length])
            del self._buffer[: 5 + length]
            if flags & FLAG_COMPRESSED:
                raise EnvdError("internal", "compressed envelopes are not supported")
            envelopes.append((flags, payload))
        return envelopes

    @property
    def has_partial(self) -> bool:
        return bool(self._buffer)


async def iter_envelopes(request: Request) -> AsyncIterator[bytes]:
    """Yields message payloads of a streaming request body as they arrive."""
    reader = EnvelopeReader()
    async for chunk in request.stream():
        for flags, payload in reader.feed(chunk):
            if flags & FLAG_END_STREAM:
                return
            yield payload
    if reader.has_partial:
        raise EnvdError("invalid_argument", "request body ends inside an envelope")


# ----- request context ------------------------------------------------------------------------


@dataclass
class RpcContext:
    """Per-call facts handlers need: headers, deadline and keepalive interval."""

    headers: dict[str, str]
    timeout_s: float | None
    keepalive_s: float
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_request(cls, request: Request) -> RpcContext:
        headers = {k.lower(): v for k, v in request.headers.items()}
        return cls(
            headers=headers, timeout_s=_timeout_s(headers), keepalive_s=_keepalive_s(headers)
        )


def _timeout_s(headers: dict[str, str]) -> float | None:
    raw = headers.get("connect-timeout-ms")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise EnvdError("invalid_argument", f"invalid connect-timeout-ms {raw!r}") from exc
    return value / 1000.0 if value > 0 else None


def _keepalive_s(headers: dict[str, str]) -> float:
    try:
        value = float(headers.get("keepalive-ping-interval", ""))
    except ValueError:
        return DEFAULT_KEEPALIVE_S
    return value if value > 0 else DEFAULT_KEEPALIVE_S


# ----- method kinds ---------------------------------------------------------------------------

UnaryFn = Callable[[Any, RpcContext], Awaitable[Message]]
ServerStreamFn = Callable[[Any, RpcContext], AsyncIterator[Message | Preencoded]]
ClientStreamFn = Callable[[AsyncIterator[Any], RpcContext], Awaitable[Message]]


@dataclass(frozen=True)
class Unary(Generic[ReqT]):
    request_type: type[ReqT]
    handler: UnaryFn


@dataclass(frozen=True)
class ServerStream(Generic[ReqT]):
    request_type: type[ReqT]
    handler: ServerStreamFn


@dataclass(frozen=True)
class ClientStream(Generic[ReqT]):
    request_type: type[ReqT]
    handler: ClientStreamFn


RpcMethod = Unary[Any] | ServerStream[Any] | ClientStream[Any]


def unary_error_response(error: EnvdError) -> Response:
    body = json.dumps({"code": error.code, "message": error.message}, separators=(",", ":"))
    return Response(body, status_code=http_status(error), media_type="application/json")


def _stream_error(error: EnvdError, content_type: str) -> Response:
    """A stream that fails before any message: 200 + end-stream error, per Connect semantics."""
    body = encode_envelope(FLAG_END_STREAM, end_stream_payload(error))
    return Response(body, status_code=200, headers={"content-type": content_type})


def make_endpoint(method: RpcMethod) -> Callable[[Request], Awaitable[Response]]:
    """Wraps one RPC handler into a starlette endpoint speaking Connect."""

    async def endpoint(request: Request) -> Response:
        if isinstance(method, Unary):
            return await _serve_unary(request, method)
        if isinstance(method, ServerStream):
            return await _serve_server_stream(request, method)
        return await _serve_client_stream(request, method)

    return endpoint


async def _read_body(request: Request) -> bytes:
    body = await request.body()
    if request.headers.get("content-encoding", "identity").lower() == "gzip":
        try:
            body = zlib.decompress(body, wbits=31)
        except zlib.error as exc:
            raise EnvdError("invalid_argument", f"invalid gzip body: {exc}") from exc
    if len(body) > MAX_MESSAGE_BYTES:
        raise EnvdError("resource_exhausted", "request too large")
    return body


async def _serve_unary(request: Request, method: Unary[Any]) -> Response:
    codec = UNARY_CODECS.get(_media_type(request))
    if codec is None:
        return Response(status_code=415, headers={"accept-post": ", ".join(UNARY_CODECS)})
    try:
        ctx = RpcContext.from_request(request)
        message = codec.decode(await _read_body(request), method.request_type)
        coro = method.handler(message, ctx)
        reply = await asyncio.wait_for(coro, ctx.timeout_s) if ctx.timeout_s else await coro
    except EnvdError as exc:
        return unary_error_response(exc)
    except TimeoutError:
        return unary_error_response(EnvdError("deadline_exceeded", "deadline exceeded"))
    media = "application/proto" if codec.binary else "application/json"
    return Response(codec.encode(reply), media_type=media)


async def _serve_server_stream(request: Request, method: ServerStream[Any]) -> Response:
    content_type = _media_type(request)
    codec = STREAM_CODECS.get(content_type)
    if codec is None:
        return Response(status_code=415, headers={"accept-post": ", ".join(STREAM_CODECS)})
    try:
        ctx = RpcContext.from_request(request)
        payloads = [p async for p in iter_envelopes(request)]
        if len(payloads) != 1:
            raise EnvdError("invalid_argument", f"expected 1 request message, got {len(payloads)}")
        message = codec.decode(payloads[0], method.request_type)
        messages = method.handler(message, ctx)
        # Pull the first message now: start-up failures become a clean end-stream error.
        first = await _first_message(messages, ctx)
    except EnvdError as exc:
        return _stream_error(exc, content_type)
    return StreamingResponse(
        _stream_body(first, messages, codec, ctx),
        status_code=200,
        headers={"content-type": content_type},
    )


async def _first_message(
    messages: AsyncIterator[Message | Preencoded], ctx: RpcContext
) -> Message | Preencoded | None:
    try:
        return await anext(messages)
    except StopAsyncIteration:
        return None


async def _stream_body(
    first: Message | Preencoded | None,
    messages: AsyncIterator[Message | Preencoded],
    codec: Codec,
    ctx: RpcContext,
) -> AsyncIterator[bytes | memoryview]:
    error: EnvdError | None = None
    try:
        if first is None:
            return
        yield codec.frame(first)
        async with asyncio.timeout(ctx.timeout_s):
            async for message in messages:
                yield codec.frame(message)
    except EnvdError as exc:
        error = exc
    except TimeoutError:
        error = EnvdError("deadline_exceeded", "deadline exceeded")
    finally:
        # Runs on client disconnect too: release the handler's resources (subscriptions).
        with contextlib.suppress(Exception):
            await messages.aclose()  # type: ignore[attr-defined]
    yield encode_envelope(FLAG_END_STREAM, end_stream_payload(error))


async def _serve_client_stream(request: Request, method: ClientStream[Any]) -> Response:
    content_type = _media_type(request)
    codec = STREAM_CODECS.get(content_type)
    if codec is None:
        return Response(status_code=415, headers={"accept-post": ", ".join(STREAM_CODECS)})

    async def decoded() -> AsyncIterator[Any]:
        async for payload in iter_envelopes(request):
            yield codec.decode(payload, method.request_type)

    try:
        ctx = RpcContext.from_request(request)
        coro = method.handler(decoded(), ctx)
        reply = await asyncio.wait_for(coro, ctx.timeout_s) if ctx.timeout_s else await coro
        body = encode_envelope(0, codec.encode(reply)) + encode_envelope(FLAG_END_STREAM, b"{}")
    except EnvdError as exc:
        body = encode_envelope(FLAG_END_STREAM, end_stream_payload(exc))
    except TimeoutError:
        err = EnvdError("deadline_exceeded", "deadline exceeded")
        body = encode_envelope(FLAG_END_STREAM, end_stream_payload(err))
    return Response(body, status_code=200, headers={"content-type": content_type})
