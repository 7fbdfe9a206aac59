"""W3C trace context into the guest, without a way out of it.

A request that carries `traceparent` (the node agent's calls to envd within a traced operation)
is continued here: envd opens a span of that trace, a child of the caller's span (logged at
debug level).
The guest cannot send spans anywhere (its network reaches no host collector, by design), so the
span goes back with the response it belongs to: `traceresponse` (W3C Trace Context Level 2)
names it, `server-timing` says how long envd took; the caller records it in the host's trace
store as envd's. No OpenTelemetry in the guest: its closure stays small.
"""

from __future__ import annotations

import logging
import os
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

# version 00: trace id (32 hex), parent span id (16 hex), flags (2 hex); all-zero ids are invalid.
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_INVALID_TRACE, _INVALID_SPAN = "0" * 32, "0" * 16


def parse_traceparent(value: str) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a valid version-00 `traceparent`, else None."""
    found = _TRACEPARENT.match(value.strip())
    if found is None:
        return None
    trace_id, parent_id, flags = found.groups()
    if trace_id == _INVALID_TRACE or parent_id == _INVALID_SPAN:
        return None
    return trace_id, parent_id, flags


class TraceContextMiddleware:
    """Continues the caller's trace: a span per request that carries `traceparent`, handed back
    in the response's headers (when they are sent: the span covers the handler's work, not a
    streamed body)."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        context = _incoming(scope) if scope["type"] == "http" else None
        if context is None:
            await self._app(scope, receive, send)
            return
        trace_id, parent_id, flags = context
        span_id = os.urandom(8).hex()
        started = time.perf_counter()

        async def send_with_span(message: Message) -> None:
            if message["type"] == "http.response.start":
                took_ms = (time.perf_counter() - started) * 1000
                message["headers"] = [
                    *message.get("headers", []),
                    (b"traceresponse", f"00-{trace_id}-{span_id}-{flags}".encode()),
                    (b"server-timing", f"envd;dur={took_ms:.3f}".encode()),
                ]
                # The ids in the message itself: envd's log format prints no extras. Debug: every
                # data-plane request through the gateway is traced, and a line costs the guest.
                log.debug(
                    "traced request trace_id=%s span_id=%s parent_span_id=%s %s %s",
                    trace_id,
                    span_id,
                    parent_id,
                    scope["path"],
                    message["status"],
                )
            await send(message)

        await self._app(scope, receive, send_with_span)


def _incoming(scope: Scope) -> tuple[str, str, str] | None:
    for name, value in scope["headers"]:
        if name == b"traceparent":
            return parse_traceparent(value.decode("latin-1"))
    return None
