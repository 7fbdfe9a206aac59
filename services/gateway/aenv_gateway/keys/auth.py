"""The gateway's API keys: the configured one, created once (0600, atomically) and read on
later starts, and the stored ones (records.py); compared in constant time, never logged."""

from __future__ import annotations

import hmac
import logging
import os
import time
from contextvars import ContextVar
from pathlib import Path

from aenv_common.errors import PermissionDenied, Unauthenticated
from aenv_common.ids import new_api_key
from aenv_gateway.keys.records import KeyIndex

log = logging.getLogger(__name__)


def load_or_create_api_key(path: Path) -> str:
    """Reads the key at `path`, or creates it there with mode 0600 if it does not exist yet.

    O_EXCL makes creation atomic: of two gateways starting at once, one writes and the other
    reads what the first wrote (retried briefly in case it reads before the write lands)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)
    key = new_api_key()
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    log.info("api key created", extra={"path": str(path)})
    return key


def _read_key(path: Path) -> str:
    for _ in range(50):
        key = path.read_text(encoding="ascii").strip()
        if key:
            return key
        time.sleep(0.01)
    raise Unauthenticated(f"api key file {path} is empty")


ADMIN_KEY_ID = "admin"

# The id of the API key of the request being served: set by `ApiKeyAuth.check`, which both edges
# call before any operation (each request runs in its own task, so its own context). It scopes
# what is kept per caller deep in the service (idempotency keys) without every call passing it.
_caller: ContextVar[str] = ContextVar("aenv_gateway_caller", default="")


def current_caller() -> str:
    """The API key id of the request being served ("" outside a request)."""
    return _caller.get()


class ApiKeyAuth:
    """The configured key (the admin key: it also manages the others) and the stored ones."""

    def __init__(self, key: str, stored: KeyIndex | None = None) -> None:
        self._key = key.encode()
        self._stored = stored

    def identify(self, presented: str | None) -> str | None:
        """The id of the key `presented` is (ADMIN_KEY_ID for the configured one), else None."""
        if presented is None:
            return None
        if hmac.compare_digest(presented.encode(), self._key):
            return ADMIN_KEY_ID
        return self._stored.key_id(presented) if self._stored is not None else None

    def check(self, presented: str | None) -> str:
        """The presented key's id. :raise Unauthenticated: no key, or not a valid one."""
        key_id = self.identify(presented)
        if key_id is None:
            raise Unauthenticated("Invalid API key")
        _caller.set(key_id)
        return key_id

    def check_admin(self, presented: str | None) -> None:
        """:raise Unauthenticated: not a valid key. :raise PermissionDenied: not the admin key."""
        if self.check(presented) != ADMIN_KEY_ID:
            raise PermissionDenied("only the admin key (the configured one) manages API keys")
