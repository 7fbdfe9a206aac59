"""The gateway stops promptly even while clients hold long-lived streams open (a process
output stream may last hours; shutdown must not wait for it)."""

from __future__ import annotations

import asyncio
import time

import httpx

from .conftest import API_KEY, Stack


async def test_stop_does_not_wait_for_open_streams(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        created = await http.post(
            "/v2/sandboxes", headers={"X-API-Key": API_KEY}, json={"templateID": "base"}
        )
        headers = {
            "E2b-Sandbox-Id": created.json()["sandboxID"],
            "E2b-Sandbox-Port": str(stack.guest_port),
        }
        async with http.stream("GET", "/stream", headers=headers) as response:
            lines = response.aiter_lines()
            assert await anext(lines) == "first"
            started = time.monotonic()
            await asyncio.wait_for(stack.gateway.stop(), timeout=30)
            assert time.monotonic() - started < 10
