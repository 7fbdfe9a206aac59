"""Fixtures: an NfsServer on a loopback port over the in-memory fake store, a ticket key, and a
factory of test clients that opens each connection with a preamble of grants."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.nfs import NfsServer
from aenv_snapstore.nfs.api import VolumeStoreLike
from aenv_snapstore.volumes import VolumeStore
from aenv_snapstore.volumes.tickets import Grant, TicketKey

from .fake_volume import FakeStore
from .nfs_client import RpcClient

VOL_A, VOL_B = "vol-aaaaaaaaaaaaaaaaaaaa", "vol-bbbbbbbbbbbbbbbbbbbb"
VOL_SMALL = "vol-ssssssssssssssssssss"  # a 64 KiB quota
SMALL_QUOTA = 64 * 1024
Connect = Callable[..., Awaitable[RpcClient]]


def preamble(key: TicketKey, *grants: Grant) -> bytes:
    return " ".join(["AENV-VOLUMES", "1", *(key.mint(g) for g in grants)]).encode() + b"\n"


def grant(volume_id: str, seen_as: str | None = None, read_only: bool = False) -> Grant:
    return Grant("sbx-test", volume_id, seen_as or volume_id, read_only)


@pytest.fixture
def key() -> TicketKey:
    return TicketKey(b"k" * 32)


@pytest.fixture(params=["fake", "real"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VolumeStoreLike]:
    """VOL_A, VOL_B and VOL_SMALL in the in-memory fake, or in the real store over a filesystem
    backend in a temp dir (closed after the test)."""
    if request.param == "fake":
        fake = FakeStore()
        fake.add(VOL_A)
        fake.add(VOL_B)
        fake.add(VOL_SMALL, SMALL_QUOTA)
        yield fake
        return
    real = VolumeStore(FsBackend(tmp_path / "backend"), tmp_path / "work",
                       default_quota_bytes=1 << 30, sync_interval_s=0.2)
    await real.start()
    try:
        await real.create(VOL_A)
        await real.create(VOL_B)
        await real.create(VOL_SMALL, SMALL_QUOTA)
        yield real
    finally:
        await real.close()


@pytest.fixture
async def server(store: VolumeStoreLike, key: TicketKey) -> AsyncIterator[tuple[NfsServer,
                                                                          tuple[str, int]]]:
    nfs = NfsServer(store, key)
    address = await nfs.start("127.0.0.1", 0)
    try:
        yield nfs, address
    finally:
        await nfs.close()


@pytest.fixture
async def connect(server: tuple[NfsServer, tuple[str, int]],
                  key: TicketKey) -> AsyncIterator[Connect]:
    """connect(*grants) or connect(raw=b"...preamble..."): a client, closed after the test."""
    clients: list[RpcClient] = []

    async def _connect(*grants: Grant, raw: bytes | None = None) -> RpcClient:
        client = await RpcClient.connect(server[1], preamble(key, *grants) if raw is None
                                         else raw)
        clients.append(client)
        return client

    try:
        yield _connect
    finally:
        for client in clients:
            await client.close()
