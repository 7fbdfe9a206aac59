"""Dashboard sessions: a random id in an HttpOnly, SameSite=Strict cookie names a record kept
only in this gateway's memory (the API key it logged in with, its CSRF token, its expiry). The
key never leaves the server: not in a URL, a page, the browser's storage or a log line."""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "aenv_dashboard"
PATH = "/dashboard"


@dataclass
class Session:
    session_id: str
    # The key it logged in with, checked again on every request (a revoked key ends it).
    api_key: str
    key_id: str
    # Sent back with every POST (a hidden field, or the X-CSRF-Token header).
    csrf: str
    expires_at: float

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented, self.csrf)


class SessionStore:
    """In memory: a gateway's restart logs everyone out, which a dashboard can afford."""

    def __init__(self, ttl_s: float, max_sessions: int = 10_000,
                 clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self._max = max_sessions
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def open(self, api_key: str, key_id: str) -> Session:
        self._expire()
        if len(self._sessions) >= self._max:  # the oldest gives way: memory stays bounded
            oldest = min(self._sessions.values(), key=lambda s: s.expires_at)
            del self._sessions[oldest.session_id]
        session = Session(secrets.token_urlsafe(32), api_key, key_id, secrets.token_urlsafe(32),
                          self._clock() + self.ttl_s)
        self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is not None and session.expires_at <= self._clock():
            self.close(session_id)
            return None
        return session

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def end_keys(self, key_ids: set[str]) -> None:
        """Ends every session of the revoked keys at once (also checked on each request)."""
        for session in [s for s in self._sessions.values() if s.key_id in key_ids]:
            self.close(session.session_id)

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self) -> None:
        now = self._clock()
        for session in [s for s in self._sessions.values() if s.expires_at <= now]:
            self.close(session.session_id)


def cookie_header(session: Session | None, ttl_s: float, secure: bool) -> str:
    """The Set-Cookie value: the session's id, or its removal (None)."""
    value, age = (session.session_id, int(ttl_s)) if session else ("", 0)
    parts = [f"{COOKIE}={value}", f"Path={PATH}", f"Max-Age={age}", "HttpOnly",
             "SameSite=Strict"]
    if secure:
        parts.append("Secure")
    return "; ".join(parts)
