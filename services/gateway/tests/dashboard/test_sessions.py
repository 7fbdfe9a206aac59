"""Logging in and out of the dashboard: the session cookie, the key kept out of every answer,
CSRF on every POST, a revoked key ending its sessions, and sessions' expiry."""

from __future__ import annotations

import logging

import pytest

from aenv_gateway.dashboard.sessions import SessionStore

from ..conftest import API_KEY, Stack
from .helpers import AUTH, client, create, login


async def test_pages_ask_for_a_login_first(stack: Stack) -> None:
    async with client(stack) as http:
        for path in ("/dashboard/sandboxes", "/dashboard/nodes", "/dashboard/events",
                     "/dashboard/templates", "/dashboard/sandboxes/rows"):
            answer = await http.get(path)
            assert answer.status_code == 303 and answer.headers["location"] == "/dashboard/login"
        form = await http.get("/dashboard/login")
        assert form.status_code == 200
        assert '<label for="api-key">API key</label>' in form.text
        assert 'type="password"' in form.text and 'method="post"' in form.text


async def test_a_wrong_key_is_refused_without_a_cookie(stack: Stack) -> None:
    async with client(stack) as http:
        answer = await http.post("/dashboard/login", data={"api_key": "e2b_not-a-key"})
        assert answer.status_code == 401 and "set-cookie" not in answer.headers
        assert "e2b_not-a-key" not in answer.text
        assert (await http.get("/dashboard/sandboxes")).status_code == 303


async def test_login_sets_a_strict_session_cookie_and_never_shows_the_key(
    stack: Stack, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with client(stack) as http:
        answer = await http.post("/dashboard/login", data={"api_key": API_KEY})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/dashboard/sandboxes"
        cookie = answer.headers["set-cookie"]
        for part in ("HttpOnly", "SameSite=Strict", "Path=/dashboard", "Max-Age=28800"):
            assert part in cookie
        assert API_KEY not in cookie
        pages = [await http.get(p) for p in ("/dashboard/sandboxes", "/dashboard/nodes",
                                             "/dashboard/events", "/dashboard/templates")]
        assert all(p.status_code == 200 for p in pages)
        assert all(API_KEY not in p.text and API_KEY not in str(p.url) for p in pages)
        assert all(p.headers["cache-control"] == "no-store" for p in pages)
    assert API_KEY not in caplog.text


async def test_posts_need_the_sessions_csrf_token(stack: Stack) -> None:
    async with client(stack) as http:
        csrf = await login(http)
        sid = await create(http)
        for token in (None, "forged"):
            data = {} if token is None else {"csrf": token}
            refused = await http.post(f"/dashboard/sandboxes/{sid}/kill", data=data)
            assert refused.status_code == 403
        assert not stack.nodeagent.kills
        assert (await http.post("/dashboard/logout", data={"csrf": "forged"})).status_code == 403
        killed = await http.post(f"/dashboard/sandboxes/{sid}/kill", data={"csrf": csrf})
        assert killed.status_code == 303
        assert [k.sandbox_id for k in stack.nodeagent.kills] == [sid]


async def test_another_sessions_token_is_refused(stack: Stack) -> None:
    async with client(stack) as first, client(stack) as second:
        token = await login(first)
        await login(second)
        sid = await create(first)
        refused = await second.post(f"/dashboard/sandboxes/{sid}/kill", data={"csrf": token})
        assert refused.status_code == 403 and not stack.nodeagent.kills


async def test_logout_ends_the_session(stack: Stack) -> None:
    async with client(stack) as http:
        csrf = await login(http)
        cookie = http.cookies.get("aenv_dashboard")
        out = await http.post("/dashboard/logout", data={"csrf": csrf})
        assert out.status_code == 303 and "Max-Age=0" in out.headers["set-cookie"]
    async with client(stack) as replay:  # the old cookie, presented again
        replay.cookies.set("aenv_dashboard", cookie or "", path="/dashboard")
        assert (await replay.get("/dashboard/sandboxes")).status_code == 303


async def test_a_revoked_key_ends_its_sessions(stack: Stack) -> None:
    async with client(stack) as http:
        made = await http.post("/admin/keys", headers=AUTH, json={"name": "operator"})
        key, key_id = made.json()["key"], made.json()["keyID"]
        await login(http, key)
        assert (await http.get("/dashboard/nodes")).status_code == 200
        revoked = await http.delete(f"/admin/keys/{key_id}", headers=AUTH)
        assert revoked.status_code == 204
        assert (await http.get("/dashboard/nodes")).status_code == 303


def test_sessions_expire_and_stay_bounded() -> None:
    now = [1000.0]
    store = SessionStore(ttl_s=60, max_sessions=2, clock=lambda: now[0])
    first = store.open("k1", "a")
    assert store.get(first.session_id) is first
    now[0] += 61
    assert store.get(first.session_id) is None
    kept = [store.open(f"k{i}", "a") for i in range(3)]
    assert len(store) == 2 and store.get(kept[0].session_id) is None
    store.end_keys({"a"})
    assert len(store) == 0
    assert first.csrf_ok(first.csrf) and not first.csrf_ok(None) and not first.csrf_ok("x")
