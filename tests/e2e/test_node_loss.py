"""A node is lost with paused sandboxes on it: nothing of them is lost. Their state is in snapstore,
so the official SDK resumes one on another node (same id, its process still counting, its files
there) and kills another; when the node comes back it drops its stale copies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from e2b import Sandbox
from e2b.exceptions import SandboxNotFoundException

from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore

from .conftest import COUNTER, another_node_agent, counter, opened_store, until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

PLATFORM_NODE = "e2e-node"  # the platform's own node agent (tests/conftest.py)
@pytest_asyncio.fixture(loop_scope="session")
async def store(platform: Platform) -> AsyncIterator[ClusterStore]:
    async with opened_store(platform.etcd_endpoints) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="session")
async def second_node(
    platform: Platform, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, str]]:
    """Another node agent of the same cluster: (node id, state dir, netns prefix)."""
    async with another_node_agent(platform, tmp_path, "e2e-node-b") as node:
        yield node


async def test_paused_sandboxes_outlive_their_node(
    platform: Platform, store: ClusterStore, sdk_env: None,
    second_node: tuple[str, Path, str],
) -> None:
    other_node, _, _ = second_node
    moved = await _paused_with_state(store, counting=True)
    dropped = await _paused_with_state(store)
    try:
        async with platform.service_down("nodeagent", crash=True):
            await until(_node_gone(store, PLATFORM_NODE), 60, "the lost node's lease to expire")
            await asyncio.sleep(6)  # a sweep of the scheduler (every 5 s) has run meanwhile
            assert (await _state(Sandbox.get_info, moved.sandbox_id)) == "paused"

            resumed = await asyncio.to_thread(Sandbox.connect, moved.sandbox_id, timeout=300)
            record = await store.get_sandbox(moved.sandbox_id)
            assert record is not None and record.node_id == other_node
            kept = await asyncio.to_thread(resumed.files.read, "/home/user/kept")
            assert kept == "before the loss"
            before = await asyncio.to_thread(counter, resumed)
            await asyncio.sleep(1.2)
            assert await asyncio.to_thread(counter, resumed) > before  # the same process

            assert await asyncio.to_thread(Sandbox.kill, dropped.sandbox_id) is True
            assert await store.get_sandbox(dropped.sandbox_id) is None
            with pytest.raises(SandboxNotFoundException):
                await asyncio.to_thread(Sandbox.get_info, dropped.sandbox_id)
        # Back: what the other node took over or dropped is no longer this node's.
        sandboxes = platform.home / "nodeagent" / "sandboxes"
        assert not (sandboxes / moved.sandbox_id).exists()
        assert not (sandboxes / dropped.sandbox_id).exists()
        assert await _state(Sandbox.get_info, moved.sandbox_id) == "running"
    finally:
        for sandbox in (moved, dropped):
            await asyncio.to_thread(Sandbox.kill, sandbox.sandbox_id)


async def _paused_with_state(store: ClusterStore, *, counting: bool = False) -> Sandbox:
    """A sandbox on the platform's node, paused, its state complete in snapstore."""
    sandbox = await asyncio.to_thread(Sandbox.create, timeout=300)
    if counting:
        await asyncio.to_thread(sandbox.commands.run, COUNTER, background=True)
        await asyncio.to_thread(sandbox.files.write, "/home/user/kept", "before the loss")
        await asyncio.sleep(1.2)
    assert await asyncio.to_thread(sandbox.pause) is True

    async def stored() -> bool:
        record = await store.get_sandbox(sandbox.sandbox_id)
        return record is not None and bool(record.paused_image)

    await until(stored, 120, "the paused state in snapstore")
    return sandbox


def _node_gone(store: ClusterStore, node_id: str) -> Callable[[], Awaitable[bool]]:
    async def gone() -> bool:
        return await store.get_node(node_id) is None
    return gone


async def _state(get_info: Callable[[str], object], sandbox_id: str) -> str:
    info = await asyncio.to_thread(get_info, sandbox_id)
    return str(info.state.value)  # type: ignore[attr-defined]
