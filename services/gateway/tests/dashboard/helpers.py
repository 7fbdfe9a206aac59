"""A logged-in dashboard client over the gateway's HTTP edge (fake scheduler and node agent)."""

from __future__ import annotations

import re

import httpx

from ..conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}
CSRF = re.compile(r'name="csrf-token" content="([^"]+)"')


def client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.url, timeout=20)


async def login(http: httpx.AsyncClient, key: str = API_KEY) -> str:
    """Logs in with `key`; the session's CSRF token (read from a page, as a browser would)."""
    answer = await http.post("/dashboard/login", data={"api_key": key})
    assert answer.status_code == 303, answer.text
    page = await http.get("/dashboard/sandboxes")
    assert page.status_code == 200
    found = CSRF.search(page.text)
    assert found is not None
    return found.group(1)


async def create(http: httpx.AsyncClient, key: str = API_KEY, **body: object) -> str:
    made = await http.post("/v2/sandboxes", headers={"X-API-Key": key},
                           json={"templateID": "base", **body})
    assert made.status_code == 201, made.text
    return str(made.json()["sandboxID"])
