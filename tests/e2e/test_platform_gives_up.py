"""`aenv up` gives up on a node agent that keeps dying, and stops everything it started, as a
Ctrl-C does: no QEMU (pool VMs, sandboxes) and no network namespace is left behind, although no
node agent was there to stop them (the node agent's cleanup does it in its place)."""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_cli.up import EXIT_FAILED, MAX_RESTARTS, run_platform
from aenv_testing.platform_ports import free_platform_ports

from ..conftest import lone_platform_env, netns_names, qemu_pids_under

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

# A node agent's start (recovery, template snapshots on disk) under TCG on a busy host; the
# platform bounds each start itself (services.py), these only bound the test.
START_WAIT_S = 600.0
RESTART_WAIT_S = 300.0


async def test_giving_up_on_the_node_agent_leaves_no_vm_or_netns(tmp_path: Path) -> None:
    prefix = "aeg" + secrets.token_hex(2) + "x"
    env = lone_platform_env(prefix, 24, AENV_NODEAGENT_WARM_POOL_VMS="1")
    home = tmp_path / "home"
    platform = Platform(home, free_platform_ports(), base_env=env)
    out = io.StringIO()
    up = asyncio.create_task(run_platform(platform, Console(file=out, width=200)))
    try:
        await _until(lambda: (home / "e2b.env").exists() or up.done(), "the platform to start",
                     START_WAIT_S)
        assert not up.done(), out.getvalue()
        async with GatewayClient.for_home(home, timeout_s=300) as client:
            sandbox = await client.create_sandbox("base", timeout_seconds=600)
        # A sandbox, and the pool's VM: started a moment after the restore, not beside it.
        await _until(lambda: len(qemu_pids_under(home)) >= 2, "the pool's VM beside the sandbox")
        assert netns_names(prefix)

        for attempt in range(MAX_RESTARTS + 1):
            await _until(_back(out, attempt), "the node agent to be back")
            nodeagent = next(c for c in platform.children if c.name == "nodeagent")
            os.kill(nodeagent.pid, signal.SIGKILL)
        assert await asyncio.wait_for(up, RESTART_WAIT_S) == EXIT_FAILED
    finally:
        if not up.done():
            up.cancel()  # stops what it started (up.py's waits clean up when cancelled)
        await asyncio.gather(up, return_exceptions=True)
        await platform.stop()  # a no-op once run_platform stopped it

    assert "giving up" in out.getvalue()
    assert qemu_pids_under(home) == []
    assert netns_names(prefix) == []
    cleanup_log = (home / "logs" / "nodeagent-cleanup.log").read_text()
    assert sandbox.sandbox_id in cleanup_log  # its record was deleted, as a kill deletes it


async def _until(
    condition: Callable[[], bool], what: str, within_s: float = RESTART_WAIT_S
) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.2)


def _back(out: io.StringIO, times: int) -> Callable[[], bool]:
    """`aenv up` has said the node agent is back this many times."""
    return lambda: out.getvalue().count("nodeagent is back") == times
