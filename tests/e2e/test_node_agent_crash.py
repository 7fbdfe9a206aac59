"""A node agent crash loses nothing: its successor re-adopts the running VMs, and the SDK's
sandbox objects keep working, the guest's processes never having stopped; a snapshot whose memory
image the crash cut short is made by the successor."""

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


# 96 MiB the snapshot's image must copy from the frozen guest: long enough (hundreds of ms under
# TCG) for the crash to come first, most of the time.
_FILL_RAM = "head -c 100663296 /dev/urandom > /dev/shm/blob && md5sum /dev/shm/blob"


async def test_a_snapshot_taken_right_before_a_crash_is_kept(
    platform: Platform, sandbox: Sandbox
) -> None:
    filled = (await asyncio.to_thread(sandbox.commands.run, _FILL_RAM)).stdout
    snapshot = await asyncio.to_thread(sandbox.create_snapshot)
    await platform.restart_service("nodeagent", crash=True)
    await asyncio.to_thread(sandbox.commands.run, "echo later > /dev/shm/blob")

    child = await asyncio.to_thread(Sandbox.create, template=snapshot.snapshot_id, timeout=300)
    try:
        restored = await asyncio.to_thread(child.commands.run, "md5sum /dev/shm/blob")
        assert restored.stdout == filled
    finally:
        await asyncio.to_thread(Sandbox.kill, child.sandbox_id)
    # Its image was written before the crash (the crashed agent's log is rotated to .1) or by the
    # successor, and the snapshot was never reported lost.
    logs = platform.home / "logs"
    lines = [line for name in ("nodeagent.log.1", "nodeagent.log")
             for line in (logs / name).read_text().splitlines() if snapshot.snapshot_id in line]
    assert any("snapshot image written" in line
               or "finishing memory images an earlier run left" in line for line in lines)
    assert not any("snapshot lost" in line for line in lines)
    assert await asyncio.to_thread(Sandbox.delete_snapshot, snapshot.snapshot_id) is True
