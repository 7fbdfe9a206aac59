"""Error responses of the HTTP edge: always `{"code": <status>, "message": ...}` JSON (the SDK
crashes on anything else), and the wrapper that turns typed errors into them."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aenv_common.errors import AenvError, ResourceExhausted
from aenv_gateway.edge_limits import BodyRefused

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


class NotImplementedYet(AenvError):
    """An E2B route this gateway knows but does not implement yet."""

    http_status = 501


# Retrying these cannot help: tell the SDK not to (its default retries 429/502/503/504).
_NO_RETRY = (ResourceExhausted, NotImplementedYet)


def error_response(status: int, message: str, no_retry: bool = False) -> JSONResponse:
    headers = {"Should-Retry": "false"} if no_retry else None
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


def typed_error_response(err: AenvError) -> JSONResponse:
    response = error_response(err.http_status, err.message, no_retry=isinstance(err, _NO_RETRY))
    retry_after_s: float | None = getattr(err, "retry_after_s", None)
    if retry_after_s is not None:
        # E.g. a full or timed-out admission queue: when to try again (whole seconds, RFC 9110).
        response.headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    if isinstance(err, BodyRefused):
        # The rest of the body would still be read to keep the connection: close it instead.
        response.headers["Connection"] = "close"
    return response


def json_errors(endpoint: Endpoint) -> Endpoint:
    """Maps typed errors raised by an endpoint to JSON error responses; anything else is a bug,
    logged and answered with a JSON 500."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except AenvError as err:
            return typed_error_response(err)
        except Exception:
            log.exception(
                "unhandled error", extra={"method": request.method, "path": request.url.path}
            )
            return error_response(500, "internal error")

    return wrapped
