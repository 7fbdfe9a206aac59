"""Fixtures shared by the node agent's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore


@pytest.fixture
async def snapstore(tmp_path: Path) -> AsyncIterator[str]:
    """The address of a real snapstore (in process, fs backend under tmp_path)."""
    running = await start_snapstore(SnapstoreSettings(
        listen="127.0.0.1:0", gc_interval_seconds=0, fs_root=tmp_path / "store",
        volume_nfs_listen="127.0.0.1:0", volume_work_dir=tmp_path / "volumes"))
    try:
        yield f"127.0.0.1:{running.port}"
    finally:
        await running.stop(grace=0)
