"""The sandbox's own variables, from its envd (`GET /envs` on the guest's loopback).

Kernels start before the template is captured, long before any sandbox exists, so a context
catches up before each execution: a restored, forked or reset sandbox may have other variables,
and `E2B_SANDBOX_ID` says which sandbox this is now. envd's variables change only at its /init
(every boot, restore and fork), after which envd replaces its init marker file: the variables are
asked for again only when the marker is another file than at the last ask, since a request to
envd costs more under emulation than the cell itself. Without a marker (an older envd, outside a
sandbox) they are asked for every time. Plain HTTP/1.0 over asyncio: the guest's Debian Python
has no HTTP client to spare.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Protocol

log = logging.getLogger(__name__)

ENVD_HOST, ENVD_PORT = "127.0.0.1", 49983
# envd's AENV_ENVD_INIT_MARKER in the guest (artifacts/guest/aenv-init.sh).
INIT_MARKER = "/run/aenv/envd-init"
TIMEOUT_S = 5.0
Marker = tuple[int, int, int]  # the marker file's device, inode and change time


class EnvSource(Protocol):
    async def fetch(self, access_token: str | None) -> dict[str, str]: ...


class EnvdEnvs:
    def __init__(self, host: str = ENVD_HOST, port: int = ENVD_PORT,
                 marker: str = INIT_MARKER) -> None:
        self._host, self._port, self._marker = host, port, marker
        self._known: tuple[Marker, dict[str, str]] | None = None

    async def fetch(self, access_token: str | None) -> dict[str, str]:
        """The variables, or none when envd cannot say (outside a sandbox)."""
        marker = _marker(self._marker)
        if marker is not None and self._known is not None and self._known[0] == marker:
            return dict(self._known[1])
        variables = await self._ask(access_token)
        # Kept only when envd answered: an empty answer from a failed ask is asked again.
        self._known = (marker, variables) if marker is not None and variables else None
        return variables

    async def _ask(self, access_token: str | None) -> dict[str, str]:
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


def _marker(path: str) -> Marker | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_ctime_ns
