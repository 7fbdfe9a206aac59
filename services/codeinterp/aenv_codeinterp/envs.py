"""The sandbox's own variables, from its envd (`GET /envs` on the guest's loopback).

Kernels start before the template is captured, long before any sandbox exists, so a context
asks envd again before each execution: a restored, forked or reset sandbox may have other
variables, and `E2B_SANDBOX_ID` says which sandbox this is now. Plain HTTP/1.0 over asyncio:
the guest's Debian Python has no HTTP client to spare.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Protocol

log = logging.getLogger(__name__)

ENVD_HOST, ENVD_PORT = "127.0.0.1", 49983
TIMEOUT_S = 5.0


class EnvSource(Protocol):
    async def fetch(self, access_token: str | None) -> dict[str, str]: ...


class EnvdEnvs:
    def __init__(self, host: str = ENVD_HOST, port: int = ENVD_PORT) -> None:
        self._host, self._port = host, port

    async def fetch(self, access_token: str | None) -> dict[str, str]:
        """The variables, or none when envd cannot say (outside a sandbox)."""
        try:
            body = await asyncio.wait_for(self._get(access_token), TIMEOUT_S)
            data = json.loads(body)
        except (TimeoutError, OSError, ValueError) as err:
            log.warning("envd has no variables for us", extra={"error": type(err).__name__})
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    async def _get(self, access_token: str | None) -> bytes:
        reader, writer = await asyncio.open_connection(self._host, self._port)
        try:
            token = f"X-Access-Token: {access_token}\r\n" if access_token else ""
            writer.write(f"GET /envs HTTP/1.0\r\nHost: localhost\r\n{token}\r\n".encode())
            await writer.drain()
            response = await reader.read()
        finally:
            writer.close()
        head, _, body = response.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1] if head.count(b" ") else b""
        if status != b"200":
            raise ValueError(f"envd answered {status.decode(errors='replace')}")
        return body
