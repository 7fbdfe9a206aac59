"""Identifiers and secrets.

Sandbox ids are lowercase alphanumerics only: they appear in host names `<port>-<id>.<domain>`,
so they must contain neither `-` nor `.` (spec e2b-compat §1.4).
"""

from __future__ import annotations

import re
import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits
SANDBOX_ID_LENGTH = 20
SANDBOX_ID_RE = re.compile(r"^[a-z0-9]{1,64}$")


def new_sandbox_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(SANDBOX_ID_LENGTH))


def new_template_id() -> str:
    """E2B's shape: like a sandbox id (a template's id also names it in URLs)."""
    return new_sandbox_id()


def new_secret(nbytes: int = 24) -> str:
    """An unguessable token (envd access tokens, API keys' random part)."""
    return secrets.token_hex(nbytes)


def new_api_key() -> str:
    """`e2b_` + 40 lowercase hex: the form every SDK release accepts client-side."""
    return "e2b_" + secrets.token_hex(20)


def is_valid_sandbox_id(value: str) -> bool:
    return bool(SANDBOX_ID_RE.match(value))
