"""Fixtures of the volume store tests: a backend (the filesystem one, or S3 on the shared moto
server), and stores over it that are closed after each test, also when it fails."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.backends.s3 import S3Backend
from aenv_snapstore.volumes import VolumeStore

GIB = 1 << 30
StoreFactory = Callable[..., VolumeStore]


async def _open_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if kind == "fs":
        return FsBackend(tmp_path / "backend")
    return await S3Backend.connect(
        bucket=f"test-{uuid.uuid4().hex[:12]}",
        endpoint_url=request.getfixturevalue("moto_endpoint"),
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        create_bucket=True,
    )


@pytest.fixture(params=["fs", pytest.param("s3", marks=pytest.mark.s3)])
async def any_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    backend = await _open_backend(request.param, tmp_path, request)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def fs_backend(tmp_path: Path) -> Backend:
    return FsBackend(tmp_path / "backend")


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """make_store(backend, work="a", **options): a started store, closed at teardown."""
    stores: list[VolumeStore] = []

    def make(backend: Backend, work: str = "work", **options: Any) -> VolumeStore:
        options.setdefault("default_quota_bytes", GIB)
        options.setdefault("sync_interval_s", 3600.0)  # tests sync explicitly unless they ask
        store = VolumeStore(backend, tmp_path / work, **options)
        stores.append(store)
        return store

    try:
        yield make
    finally:
        for store in stores:
            try:
                await store.close()
            except Exception:  # a test's broken backend: nothing more to close
                pass


async def new_volume(store: VolumeStore, volume_id: str = "vol-test", quota: int = 0) -> Any:
    await store.create(volume_id, quota)
    return await store.open(volume_id)
