"""Streaming HTTP/WebSocket reverse proxy core, shared by the gateway and the node agent's proxy.

Nothing is buffered: request bodies (chunked or sized) are streamed upstream as they arrive and
response bodies are forwarded chunk by chunk as aiohttp reads them, so Connect server streams and
long-lived command output flow through at once. A client that disconnects cancels the response
iterator, which closes the upstream connection, so the upstream sees the disconnect too.

The other way round, a body the upstream breaks off (or that `cut` ends) is not ended cleanly:
the client's connection is dropped, so the client sees a broken stream, as E2B's proxies make it
see one when a sandbox dies mid-request. The SDKs then probe the sandbox's health and report it
killed; a clean end would pass for a complete download. A Connect server stream broken off
between two envelopes is the exception, as on E2B: it ends with an end-of-stream envelope
carrying `unavailable` and the caller's message (connect_end.py), which the SDKs read as a status
and answer with the same probe.

Connection failures become typed errors (`UpstreamRefused`, `UpstreamUnavailable`) that the caller
turns into its own 502 body (the gateway and node proxy word them per the E2B contract).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from multidict import CIMultiDict
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect
from yarl import URL

from aenv_common.connect_end import EnvelopeTracker, end_stream_envelope, is_connect_stream
from aenv_common.errors import AenvError, BadGateway, Relayed

log = logging.getLogger(__name__)

# RFC 9110 §7.6.1 hop-by-hop headers, plus Host (aiohttp sets it from the upstream URL).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
# Handshake headers aiohttp's ws_connect generates itself.
_WS_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
# aiohttp would otherwise add these to requests that lack them (e.g. Accept-Encoding, which
# would make upstreams compress what the client never asked to be compressed).
_SKIP_AUTO_HEADERS = ("Accept-Encoding", "User-Agent", "Content-Type")
# Connect and read deadlines only; no total or idle timeout: streams may live for hours.
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)


class UpstreamRefused(BadGateway):
    """Nothing listens on the upstream port (connection refused)."""


class UpstreamUnavailable(BadGateway):
    """The upstream could not be reached or failed before sending a response."""


class StreamBroken(Exception):
    """Raised from a relayed body whose upstream broke off: the server drops the connection
    (uvicorn closes it when the app fails after the response started)."""


class _QuietBreaks(logging.Filter):
    """uvicorn logs every app failure with its traceback; a broken stream is no failure here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StreamBroken))


logging.getLogger("uvicorn.error").addFilter(_QuietBreaks())


class HandshakeRejected(Relayed):
    """The upstream answered a WebSocket handshake with an HTTP error: passed on as it is."""


def forwardable_headers(
    headers: Mapping[str, str] | list[tuple[str, str]], extra_drop: frozenset[str] = frozenset()
) -> CIMultiDict[str]:
    """Headers minus hop-by-hop ones, including those the `Connection` header names."""
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    named = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    drop = HOP_BY_HOP | named | extra_drop
    return CIMultiDict((k, v) for k, v in items if k.lower() not in drop)


def _request_headers(
    request: Request | WebSocket, extra: Mapping[str, str] | None
) -> CIMultiDict[str]:
    drop = _WS_HANDSHAKE if isinstance(request, WebSocket) else frozenset()
    out = forwardable_headers(request.headers.items(), drop)
    client = request.client
    if client is not None:
        prior = out.get("x-forwarded-for")
        out["X-Forwarded-For"] = f"{prior}, {client.host}" if prior else client.host
    host = request.headers.get("host")
    if host and "x-forwarded-host" not in out:
        out["X-Forwarded-Host"] = host
    for name, value in (extra or {}).items():
        out[name] = value
    return out


def upstream_url(scope_path: bytes, query: bytes, upstream_base: str) -> str:
    # raw_path keeps the client's percent-encoding byte for byte.
    url = upstream_base.rstrip("/") + scope_path.decode("latin-1")
    if query:
        url += "?" + query.decode("latin-1")
    return url


def _raw_path(scope: Mapping[str, Any]) -> bytes:
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw.split(b"?", 1)[0]
    return str(scope["path"]).encode()


def _has_body(request: Request) -> bool:
    headers = request.headers
    if "transfer-encoding" in headers:
        return True
    return int(headers.get("content-length", "0") or "0") > 0


def _to_typed_error(err: aiohttp.ClientError, url: str) -> AenvError:
    if isinstance(err, aiohttp.ClientConnectorError) and isinstance(
        err.os_error, ConnectionRefusedError
    ):
        return UpstreamRefused(f"connection refused by {url}")
    return UpstreamUnavailable(f"upstream {url} failed: {type(err).__name__}: {err}")


class StreamingProxy:
    """Forwards one HTTP request or WebSocket session to `upstream_base` + the original path."""

    def __init__(
        self, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT
    ) -> None:
        self._session = session
        self._timeout = timeout
        # The response bodies being relayed, for `cut`; and what a cut Connect stream's end
        # says instead of its own `stream_end_message`.
        self._relaying: set[aiohttp.ClientResponse] = set()
        self._cut_with: dict[aiohttp.ClientResponse, str] = {}

    def cut(self, reason: str, stream_end_message: str | None = None) -> None:
        """Break off every response body being relayed, now: each client sees its stream broken
        (a Connect stream's end says `stream_end_message` when given). Closing the session
        alone would not do it: aiohttp detaches a body from the connection it closes, and a
        read waiting on that body waits forever. Requests still waiting for their upstream's
        answer end when the session closes."""
        for upstream in list(self._relaying):
            if stream_end_message is not None:
                self._cut_with[upstream] = stream_end_message
            upstream.content.set_exception(aiohttp.ClientPayloadError(reason))

    async def forward(
        self,
        request: Request,
        upstream_base: str,
        extra_headers: Mapping[str, str] | None = None,
        stream_end_message: str | None = None,
    ) -> Response:
        """Sends the request upstream and returns a response that streams the upstream's body.
        A Connect stream the upstream breaks off ends with `stream_end_message` when given.

        Raises `UpstreamRefused`/`UpstreamUnavailable` before any byte is sent to the client."""
        url = upstream_url(
            _raw_path(request.scope), request.scope.get("query_string", b""), upstream_base
        )
        body = request.stream() if _has_body(request) else None
        try:
            upstream = await self._session.request(
                request.method,
                URL(url, encoded=True),
                headers=_request_headers(request, extra_headers),
                data=body,
                allow_redirects=False,
                auto_decompress=False,
                skip_auto_headers=_SKIP_AUTO_HEADERS,
                timeout=self._timeout,
            )
        except aiohttp.ClientError as err:
            raise _to_typed_error(err, url) from err
        end_message = (
            stream_end_message
            if is_connect_stream(upstream.status, upstream.headers.get("content-type", ""))
            else None
        )
        response = StreamingResponse(
            self._relay_body(upstream, end_message), status_code=upstream.status
        )
        # Set raw headers directly: keeps repeated headers (Set-Cookie) and adds none of our own.
        response.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in forwardable_headers(list(upstream.headers.items())).items()
        ]
        return response

    async def forward_websocket(
        self,
        websocket: WebSocket,
        upstream_base: str,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        """Connects upstream first (so refusals surface as typed errors before the client's
        handshake is answered), then accepts and pumps frames both ways until either side closes."""
        url = upstream_url(
            _raw_path(websocket.scope), websocket.scope.get("query_string", b""), upstream_base
        )
        protocols = [
            p.strip()
            for p in websocket.headers.get("sec-websocket-protocol", "").split(",")
            if p.strip()
        ]
        try:
            upstream = await self._session.ws_connect(
                URL(url, encoded=True),
                headers=_request_headers(websocket, extra_headers),
                protocols=protocols,
                autoping=True,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10),
            )
        except aiohttp.WSServerHandshakeError as err:
            raise HandshakeRejected(
                f"upstream {url} refused the websocket: {err.status}", err.status
            ) from err
        except aiohttp.ClientError as err:
            raise _to_typed_error(err, url) from err
        async with upstream:
            await websocket.accept(subprotocol=upstream.protocol)
            await _pump_websocket(websocket, upstream)

    async def _relay_body(
        self, upstream: aiohttp.ClientResponse, end_message: str | None
    ) -> AsyncIterator[bytes]:
        """`end_message`: set for a Connect stream, which a break between envelopes ends with
        an end-of-stream error instead of breaking off (the module's docstring)."""
        self._relaying.add(upstream)
        envelopes = EnvelopeTracker() if end_message is not None else None
        try:
            async for chunk in upstream.content.iter_any():
                if envelopes is not None:
                    envelopes.advance(chunk)
                yield chunk
        except aiohttp.ClientError as err:
            log.info("upstream stream broke", extra={"url": str(upstream.url), "error": str(err)})
            if end_message is None or envelopes is None or not envelopes.at_boundary:
                # Status and headers are already sent: the client can only be shown the break.
                raise StreamBroken(str(err)) from err
            yield end_stream_envelope("unavailable", self._cut_with.get(upstream, end_message))
        finally:
            self._relaying.discard(upstream)
            self._cut_with.pop(upstream, None)
            # On client disconnect the iterator is cancelled/closed here: closing (not releasing)
            # drops the upstream connection, so the upstream notices the client went away.
            upstream.close()


async def _pump_websocket(client: WebSocket, upstream: aiohttp.ClientWebSocketResponse) -> None:
    to_upstream = asyncio.create_task(_client_to_upstream(client, upstream))
    to_client = asyncio.create_task(_upstream_to_client(upstream, client))
    try:
        await asyncio.wait({to_upstream, to_client}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (to_upstream, to_client):
            task.cancel()
        for task in (to_upstream, to_client):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _client_to_upstream(client: WebSocket, upstream: aiohttp.ClientWebSocketResponse) -> None:
    try:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(code=int(message.get("code", 1000)))
                return
            if message.get("bytes") is not None:
                await upstream.send_bytes(message["bytes"])
            elif message.get("text") is not None:
                await upstream.send_str(message["text"])
    except WebSocketDisconnect as err:
        await upstream.close(code=err.code)


async def _upstream_to_client(upstream: aiohttp.ClientWebSocketResponse, client: WebSocket) -> None:
    async for message in upstream:
        if message.type == aiohttp.WSMsgType.TEXT:
            await client.send_text(message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await client.send_bytes(message.data)
        elif message.type == aiohttp.WSMsgType.ERROR:
            break
    code = upstream.close_code or 1000
    with contextlib.suppress(RuntimeError):
        await client.close(code=code if code != 1006 else 1011)


async def deny_websocket(websocket: WebSocket, response: Response) -> None:
    """Answers the handshake with an HTTP error when the server supports it, else closes."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=1011)
