"""Fixtures: an NfsServer on a loopback port over the in-memory fake store, a ticket key, and a
factory of test clients that opens each connection with a preamble of grants."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from aenv_snapstore.nfs import NfsServer
from aenv_snapstore.volumes.tickets import Grant, TicketKey

from .fake_volume import FakeStore
from .nfs_client import RpcClient

VOL_A, VOL_B = "vol-aaaaaaaaaaaaaaaaaaaa", "vol-bbbbbbbbbbbbbbbbbbbb"
Connect = Callable[..., Awaitable[RpcClient]]


def preamble(key: TicketKey, *grants: Grant) -> bytes:
    return " ".join(["AENV-VOLUMES", "1", *(key.mint(g) for g in grants)]).encode() + b"\n"


def grant(volume_id: str, seen_as: str | None = None, read_only: bool = False) -> Grant:
    return Grant("sbx-test", volume_id, seen_as or volume_id, read_only)


@pytest.fixture
def key() -> TicketKey:
    return TicketKey(b"k" * 32)


@pytest.fixture
def store() -> FakeStore:
    fake = FakeStore()
    fake.add(VOL_A)
    fake.add(VOL_B)
    return fake


@pytest.fixture
async def server(store: FakeStore, key: TicketKey) -> AsyncIterator[tuple[NfsServer,
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
