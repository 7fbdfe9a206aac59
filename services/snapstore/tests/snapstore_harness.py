"""Helpers shared by the snapstore tests and their fixtures."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.config import S3Settings, SnapstoreSettings


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def s3_settings(endpoint: str) -> S3Settings:
    return S3Settings(
        bucket=f"test-{uuid.uuid4().hex[:12]}",
        endpoint_url=endpoint,
        access_key_id="testing",
        secret_access_key=SecretStr("testing"),
        create_bucket=True,
    )


@dataclass
class Harness:
    stub: Any  # SnapStoreServiceStub
    # A second handle on the server's backend, for inspecting and corrupting stored objects.
    backend: Backend
    settings: SnapstoreSettings


def settings_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> SnapstoreSettings:
    settings = SnapstoreSettings(
        listen="127.0.0.1:0", gc_interval_seconds=0, fs_root=tmp_path / "store",
        volume_nfs_listen="127.0.0.1:0", volume_work_dir=tmp_path / "volumes",
        volume_gc_interval_s=0,
    )
    if kind == "s3":
        settings.backend = "s3"
        settings.s3 = s3_settings(request.getfixturevalue("moto_endpoint"))
    return settings


def write_pattern(path: Path, size: int, seed: int = 1) -> bytes:
    """Non-repeating, non-zero bytes: every chunk of the file is distinct."""
    data = b"".join(
        seed.to_bytes(4, "little") + i.to_bytes(4, "little") for i in range(size // 8 + 1)
    )[:size]
    path.write_bytes(data)
    return data


def write_sparse(path: Path, size: int, extents: dict[int, bytes]) -> None:
    """A sparse file of `size` bytes (a hole) with `extents` (offset -> bytes) written in."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in extents.items():
            f.seek(offset)
            f.write(data)
