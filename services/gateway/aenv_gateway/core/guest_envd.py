"""How the native API reaches a sandbox's envd: through the owning node's data-plane proxy (the
path SDK traffic takes, so the node cuts these streams too when the sandbox stops serving), with
the routing headers and the sandbox's envd access token; and envd's or the proxy's refusals as
the typed errors the edge maps to status codes."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import aiohttp

from aenv_common.errors import (
    AenvError,
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from aenv_common.sandbox_routing import ENVD_PORT, NOT_FOUND_MESSAGE, SandboxTarget
from aenv_gateway.core.sandboxes import SandboxService

# envd's (Connect's) error codes -> the typed errors; anything else is Internal.
_BY_CONNECT_CODE: dict[str, type[AenvError]] = {
    "deadline_exceeded": DeadlineExceeded,
    "invalid_argument": InvalidArgument,
    "not_found": NotFound,
    "permission_denied": PermissionDenied,
    "resource_exhausted": ResourceExhausted,
    "unavailable": Unavailable,
}
_BY_HTTP_STATUS: dict[int, type[AenvError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    429: ResourceExhausted,
    503: Unavailable,
    504: DeadlineExceeded,
    # envd's "the disk is full".
    507: ResourceExhausted,
}


@dataclass(frozen=True)
class Guest:
    """One sandbox's envd, as this gateway reaches it."""

    sandbox_id: str
    base_url: str
    headers: dict[str, str]
    session: aiohttp.ClientSession


class GuestEnvd:
    def __init__(self, service: SandboxService, session: aiohttp.ClientSession) -> None:
        self._service = service
        self._session = session

    async def guest(self, sandbox_id: str, user: str = "") -> Guest:
        """The running sandbox's envd, acting as `user` (empty: its default user). A paused
        sandbox created with auto-resume is resumed first, as SDK traffic resumes it.

        :raise NotFound: no such sandbox.
        :raise Conflict: it is paused (without auto-resume).
        """
        located = await self._service.wake(sandbox_id) or self._service.running(sandbox_id)
        headers = SandboxTarget(sandbox_id, ENVD_PORT).headers()
        if token := located.record.envd_access_token:
            headers["x-access-token"] = token
        if user:
            # E2B's way of naming the user: Basic auth with an empty password.
            headers["authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
        return Guest(sandbox_id, f"http://{located.owner.proxy_address}", headers, self._session)

    async def broken(self, sandbox_id: str, err: Exception) -> AenvError:
        """The error of a stream to the guest that broke off: NotFound when the sandbox is gone
        (killed, expired, lost: its owner says so), else Unavailable."""
        try:
            await self._service.get(sandbox_id)
        except NotFound as gone:
            return gone
        except AenvError:
            pass
        return Unavailable(f"the stream to sandbox {sandbox_id} broke off: {type(err).__name__}")


def http_refusal(sandbox_id: str, status: int, body: bytes) -> AenvError:
    """envd's (or the node proxy's) error answer as a typed error."""
    try:
        answer = json.loads(body or b"{}")
        message = str(answer.get("message") or f"HTTP {status}")
    except (ValueError, AttributeError):
        message = f"HTTP {status}"
    if status == 502:
        # The node proxy: the sandbox stopped serving, or envd's port does not answer.
        if NOT_FOUND_MESSAGE in message:
            return NotFound(f'sandbox "{sandbox_id}" not found')
        return Unavailable(f"sandbox {sandbox_id} is unreachable: {message}")
    return typed_http_error(status, message)


def typed_http_error(status: int, message: str) -> AenvError:
    """The typed error of an HTTP-style status code (as envd, the node proxy and a fork's
    per-child errors give them); Internal for any other."""
    return _BY_HTTP_STATUS.get(status, Internal)(message)


def connect_error(code: str, message: str) -> AenvError:
    """An error a Connect stream of envd ended with."""
    return _BY_CONNECT_CODE.get(code, Internal)(message or code)
