"""The gateway's API key: created once (0600, atomically), read on later starts, compared in
constant time. The key itself is never logged."""

from __future__ import annotations

import hmac
import logging
import os
import time
from pathlib import Path

from aenv_common.errors import Unauthenticated
from aenv_common.ids import new_api_key

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


class ApiKeyAuth:
    def __init__(self, key: str) -> None:
        self._key = key.encode()

    def check(self, presented: str | None) -> None:
        """Raises Unauthenticated unless `presented` is the key."""
        if presented is None or not hmac.compare_digest(presented.encode(), self._key):
            raise Unauthenticated("Invalid API key")
