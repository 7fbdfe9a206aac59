"""Fixtures for real-netns tests: a unique name prefix per run and a final sweep of it."""

from __future__ import annotations

import asyncio
import itertools
import random
import string
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_testing.subnets import free_subnet

from .helpers import remove_everything_named


@pytest.fixture(scope="session")
def run_prefix() -> Iterator[str]:
    """`aet` + random letters: never collides with real slots or with another run."""
    prefix = "aet" + "".join(random.choices(string.ascii_lowercase, k=4))
    try:
        yield prefix
    finally:
        # pyroute2's sync API runs its own event loop: keep it off any running one
        with ThreadPoolExecutor(1) as pool:
            pool.submit(remove_everything_named, prefix).result()


_test_letters = itertools.product(string.ascii_lowercase, repeat=2)


@pytest.fixture
def net_config(run_prefix: str) -> NetworkConfig:
    # One sub-prefix per test so a test's leftovers can be found and asserted on.
    sub = "".join(next(_test_letters))
    return NetworkConfig(prefix=f"{run_prefix}{sub}", pool_cidr=free_subnet(22))


@pytest.fixture
async def manager(net_config: NetworkConfig) -> AsyncIterator[NetworkManager]:
    mgr = NetworkManager(net_config)
    try:
        yield mgr
    finally:
        await mgr.destroy_orphans(keep=set())
        await asyncio.to_thread(remove_everything_named, net_config.prefix)
