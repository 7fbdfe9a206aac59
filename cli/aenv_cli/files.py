"""Small files of the data directory: the API key (read), e2b.env (written, private)."""

from __future__ import annotations

import os
from pathlib import Path

API_KEY_FILE = "api-key"
E2B_ENV_FILE = "e2b.env"


def write_private_file(path: Path, text: str) -> None:
    """Writes `text` with mode 0600 from the first byte (never briefly world-readable), and
    atomically: a reader sees the old content or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is filtered by the umask; this is not
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_api_key(home: Path) -> str:
    return (home / API_KEY_FILE).read_text(encoding="utf-8").strip()


def e2b_env_lines(api_key: str, api_url: str, sandbox_url: str) -> list[str]:
    return [
        f"E2B_API_KEY={api_key}",
        f"E2B_API_URL={api_url}",
        f"E2B_SANDBOX_URL={sandbox_url}",
        # The SDK's volume content calls do not follow E2B_API_URL (they default to
        # https://api.<domain>): without this they would leave the platform with the token.
        f"E2B_VOLUME_API_URL={api_url}",
    ]
