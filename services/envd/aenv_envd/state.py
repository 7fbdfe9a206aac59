"""Sandbox-wide runtime state set by POST /init: token, env vars, default user and workdir."""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from .users import User, lookup_user, user_exists


@dataclass
class SandboxState:
    access_token: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    default_user: str | None = None
    default_workdir: str | None = None

    def token_matches(self, presented: str | None) -> bool:
        """True when no token is configured or the presented one equals it."""
        if not self.access_token:
            return True
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode(), self.access_token.encode())

    def default_username(self) -> str:
        if self.default_user:
            return self.default_user
        return "user" if user_exists("user") else "root"

    def resolve_user(self, name: str | None) -> User:
        return lookup_user(name or self.default_username())
