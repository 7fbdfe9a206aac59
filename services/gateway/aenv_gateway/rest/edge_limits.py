"""Bounds on slow and endless clients at the HTTP edge: a client holds a connection
only while it sends a request's headers within `header_timeout_s` (slowloris, idle sockets),
and a control-plane request's body is at most `max_body_bytes`, in full within
`body_timeout_s` (never-ending or trickled uploads). Sandbox traffic and the signed context
upload and a volume's file upload stream as long as they flow: those bodies are the user's
files.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from starlette.types import Message, Receive, Scope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from aenv_common import errors
from aenv_common.errors import AenvError

# The signed upload of a template build's files (up to uploads.MAX_CONTEXT_BYTES), and a
# volume's file upload (bounded by the volume's quota: volumes/content.py).
_STREAMED_UPLOAD = re.compile(r"^(/templates/[^/]+/files/[^/]+|/volumecontent/[^/]+/file)$")


class BodyRefused(AenvError):
    """A body the edge stopped reading: its answer closes the connection."""


class BodyTooLarge(BodyRefused, errors.BodyTooLarge):
    """A control-plane body past `max_body_bytes`."""


class BodyTimeout(BodyRefused, errors.RequestTimeout):
    """A control-plane body not in by `body_timeout_s`."""


@dataclass(frozen=True)
class EdgeLimits:
    header_timeout_s: float
    max_body_bytes: int
    body_timeout_s: float


def guarded_http_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers are not in
    within `header_timeout_s` of its opening or of the request's first byte. (uvicorn's own
    keep-alive timer stops at the first byte, so a client trickling headers would hold its
    connection for ever.)"""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedHttpToolsProtocol


def bounded_body(scope: Scope, receive: Receive, limits: EdgeLimits) -> Receive:
    """`receive` of a control-plane request, raising BodyTooLarge past `max_body_bytes` and
    BodyTimeout when the body is not in by `body_timeout_s` (the endpoint's error wrapper
    answers them as 413 and 408)."""
    if scope.get("method") == "PUT" and _STREAMED_UPLOAD.match(scope["path"]):
        return receive
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_timeout_s
    received = 0
    complete = False

    async def bounded() -> Message:
        nonlocal received, complete
        if complete:  # after the body: waiting for a disconnect has no deadline
            return await receive()
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            raise BodyTimeout(
                f"the request body did not arrive within {limits.body_timeout_s:g} s") from None
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limits.max_body_bytes:
                raise BodyTooLarge(f"a request body may hold at most {limits.max_body_bytes} bytes")
            complete = not message.get("more_body", False)
        return message

    return bounded
