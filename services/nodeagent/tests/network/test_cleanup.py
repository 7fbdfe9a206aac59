"""`python -m aenv_nodeagent cleanup` (restart/cleanup.py) against the real kernel: what a node
agent that is gone left running — processes in its slots, the slots, running sandboxes'
directories — is removed; paused sandboxes stay for the next start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aenv_common.config import CommonSettings
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.network import EgressPolicy, NetworkConfig, NetworkManager, netns_exec_prefix
from aenv_nodeagent.network.namespaces import pids_in_netns
from aenv_nodeagent.restart.cleanup import clean_up
from aenv_nodeagent.sandbox.model import PAUSED_MARKER

from .test_manager import kernel_objects

pytestmark = pytest.mark.netns


async def test_cleanup_stops_what_a_gone_agent_left(
    manager: NetworkManager, net_config: NetworkConfig, tmp_path: Path
) -> None:
    busy = await manager.create_slot(EgressPolicy())
    await manager.create_slot(EgressPolicy())  # an idle one, as the warm pool keeps
    # A process in a slot, in a session of its own as a VM is: it outlives its starter.
    guest = await asyncio.create_subprocess_exec(
        *netns_exec_prefix(busy), "sleep", "600", start_new_session=True)
    async with asyncio.timeout(10):  # nsenter has entered the slot's netns
        while guest.pid not in pids_in_netns([busy.netns]):  # noqa: ASYNC110 - no event for it
            await asyncio.sleep(0.01)
    sandboxes = tmp_path / "state" / "sandboxes"
    (sandboxes / "running1").mkdir(parents=True)
    (sandboxes / "paused1").mkdir()
    (sandboxes / "paused1" / PAUSED_MARKER).write_text("{}")
    settings = NodeAgentSettings(
        state_dir=tmp_path / "state", net_prefix=net_config.prefix,
        net_pool_cidr=net_config.pool_cidr,
        # No etcd: the records are left to the next start's recovery, the rest is done.
        common=CommonSettings(home=tmp_path, etcd_endpoints="127.0.0.1:1"))
    try:
        cleaned = await clean_up(settings)
        assert await asyncio.wait_for(guest.wait(), 10) == -9
    finally:
        if guest.returncode is None:
            guest.kill()
            await guest.wait()
    assert cleaned.killed == [guest.pid]
    assert len(cleaned.netns_removed) == 2
    assert kernel_objects(net_config.prefix) == []
    assert sorted(p.name for p in sandboxes.iterdir()) == ["paused1"]
    assert cleaned.records_deleted == []
