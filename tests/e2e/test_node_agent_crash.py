"""A node agent crash loses nothing: its successor re-adopts the running VMs, and the SDK's
sandbox objects keep working, the guest's processes never having stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform

from .conftest import COUNTER, counter

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

@pytest.fixture
def sandbox(sdk_env: None) -> Iterator[Sandbox]:
    made = Sandbox.create(timeout=300)
    try:
        yield made
    finally:
        Sandbox.kill(made.sandbox_id)


async def test_running_sandboxes_outlive_a_node_agent_crash(
    platform: Platform, sandbox: Sandbox
) -> None:
    await asyncio.to_thread(sandbox.commands.run, COUNTER, background=True)
    await asyncio.to_thread(sandbox.files.write, "/root/kept", "before the crash")
    await asyncio.sleep(1.2)
    before = await asyncio.to_thread(counter, sandbox)

    crashed_at = time.monotonic()
    await platform.restart_service("nodeagent", crash=True)
    down_s = time.monotonic() - crashed_at

    assert await asyncio.to_thread(sandbox.files.read, "/root/kept") == "before the crash"
    after = await asyncio.to_thread(counter, sandbox)
    # The same counting process went on while the agent was down (one tick per 0.5 s).
    assert after >= before + int(down_s / 0.5) - 1, (before, after, down_s)
    info = await asyncio.to_thread(Sandbox.get_info, sandbox.sandbox_id)
    assert info.state.value == "running"
    result = await asyncio.to_thread(sandbox.commands.run, "echo still here")
    assert result.stdout == "still here\n"
