"""Sandboxes through the official e2b SDK, the supported client of envd (commands, PTYs,
files), and the SDK's exceptions as the typed errors the commands' edge shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
    TimeoutException,
)

from aenv_cli.server import Server
from aenv_common.errors import (
    AenvError,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    Unauthenticated,
    Unavailable,
)

_used = False


def sdk_used() -> bool:
    """Has this process opened a sandbox through the SDK (and so started its HTTP pools)?"""
    return _used


async def connect(server: Server, sandbox_id: str) -> AsyncSandbox:
    """The sandbox (a paused one is resumed, as the SDK's connect does)."""
    global _used
    _used = True
    async with sdk_errors(server):
        return await AsyncSandbox.connect(
            sandbox_id, api_key=server.api_key, api_url=server.url, sandbox_url=server.url)


@asynccontextmanager
async def sdk_errors(server: Server) -> AsyncIterator[None]:
    """Maps the SDK's exceptions inside the block to typed errors with their message."""
    try:
        yield
    except AenvError:
        raise
    except AuthenticationException as err:
        raise Unauthenticated(f"the server at {server.url} refused the API key: {err}") from None
    except NotFoundException as err:
        raise NotFound(_text(err)) from None
    except InvalidArgumentException as err:
        raise InvalidArgument(_text(err)) from None
    except TimeoutException as err:
        raise DeadlineExceeded(_text(err)) from None
    except SandboxException as err:
        raise AenvError(_text(err)) from None
    except httpx.TransportError as err:
        raise Unavailable(f"cannot reach the aenv server at {server.url} "
                          f"({type(err).__name__})") from None


def _text(err: Exception) -> str:
    return str(err) or type(err).__name__
