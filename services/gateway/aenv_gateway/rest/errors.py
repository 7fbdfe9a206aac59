"""Error responses of the HTTP edge: always `{"code": <status>, "message": ...}` JSON (the SDK
crashes on anything else), the status from the HTTP table (boundary.py answers every typed
error a route raises with one)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aenv_common.errors import AenvError, ResourceExhausted, Unimplemented
from aenv_common.status_tables import http_status
from aenv_gateway.rest.edge_limits import BodyRefused

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


class NotImplementedYet(Unimplemented):
    """An E2B route this gateway knows but does not implement yet."""


def error_response(
    status: int, message: str, no_retry: bool = False, error_code: str | None = None
) -> JSONResponse:
    headers = {"Should-Retry": "false"} if no_retry else None
    body: dict[str, object] = {"code": status, "message": message}
    if error_code:
        body["error_code"] = error_code  # E2B's machine-readable code (the SDKs branch on it)
    return JSONResponse(body, status_code=status, headers=headers)


def typed_error_response(err: AenvError) -> JSONResponse:
    retry_after_s: float | None = getattr(err, "retry_after_s", None)
    response = error_response(
        http_status(err), err.message, no_retry=_never_helps(err, retry_after_s),
        error_code=err.error_code)
    if retry_after_s is not None:
        # E.g. a full or timed-out admission queue: when to try again (whole seconds, RFC 9110).
        # Marked for the SDK's retry (a present Should-Retry header is its only word on it).
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
        response.headers["Should-Retry"] = "true"
    if isinstance(err, BodyRefused):
        # The rest of the body would still be read to keep the connection: close it instead.
        response.headers["Connection"] = "close"
    return response


def _never_helps(err: AenvError, retry_after_s: float | None) -> bool:
    """Tell the SDK not to retry (its default retries 429/502/503/504 without the header): a
    route not implemented, or a refusal for room no node could ever give."""
    return isinstance(err, NotImplementedYet) or (
        isinstance(err, ResourceExhausted) and retry_after_s is None)
