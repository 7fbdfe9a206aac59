"""A node agent SIGKILLed while it captures a template leaves the capture's QEMU running in
`<templates>/<id>/.build-*/vm/`: the next start's recovery and `python -m aenv_nodeagent cleanup`
end it and remove the folder, unless a live process (another node agent sharing the templates
folder) still holds the capture lock. Real QEMU processes, a real killed agent process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_common.config import CommonSettings
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.restart.builds import end_abandoned_builds
from aenv_nodeagent.restart.cleanup import clean_up
from aenv_nodeagent.restart.recovery import recover
from aenv_testing.records import MemoryRecords
from aenv_testing.subnets import free_subnet

pytestmark = pytest.mark.vm

AGENT = Path(__file__).with_name("capturing_agent.py")


@dataclass
class Capture:
    agent: asyncio.subprocess.Process
    qemu_pid: int
    build: Path


@contextlib.asynccontextmanager
async def capture_under_way(templates: Path) -> AsyncIterator[Capture]:
    template = templates / "base"
    build = template / ".build-x1y2"
    template.mkdir(parents=True)
    (template / "key").mkdir()  # a capture made earlier: it stays
    agent = await asyncio.create_subprocess_exec(
        sys.executable, str(AGENT), str(template), str(build), stdout=asyncio.subprocess.PIPE
    )
    assert agent.stdout is not None
    qemu_pid = 0
    try:
        qemu_pid = int(await asyncio.wait_for(agent.stdout.readline(), 30))
        yield Capture(agent, qemu_pid, build)
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
        if qemu_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(qemu_pid, signal.SIGKILL)
        assert (template / "key").is_dir()


async def _killed(capture: Capture) -> None:
    capture.agent.send_signal(signal.SIGKILL)
    assert await capture.agent.wait() == -signal.SIGKILL
    assert _alive(capture.qemu_pid)  # its own session: the agent's death leaves it running


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _gone(pid: int) -> bool:
    for _ in range(100):
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_recovery_ends_the_capture_a_killed_agent_left(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    async with capture_under_way(templates) as capture:
        await _killed(capture)
        network = NetworkManager(
            NetworkConfig(prefix="aer" + secrets.token_hex(2) + "x", pool_cidr=free_subnet(24))
        )
        await recover(
            "n1", tmp_path / "state", network, MemoryRecords(), [], templates_dir=templates
        )
        assert await _gone(capture.qemu_pid)
        assert not capture.build.exists()


async def test_cleanup_ends_the_capture_a_killed_agent_left(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    async with capture_under_way(templates) as capture:
        await _killed(capture)
        cleaned = await clean_up(
            NodeAgentSettings(
                state_dir=tmp_path / "state",
                templates_dir=templates,
                net_prefix="aec" + secrets.token_hex(2) + "x",
                net_pool_cidr=free_subnet(24),
                vmm_cgroups="off",
                common=CommonSettings(home=tmp_path, etcd_endpoints="127.0.0.1:1"),
            )
        )
        assert capture.qemu_pid in cleaned.killed
        assert not _alive(capture.qemu_pid)
        assert not capture.build.exists()


async def test_a_capture_whose_agent_lives_is_left_alone(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    async with capture_under_way(templates) as capture:
        abandoned = end_abandoned_builds(templates)
        assert abandoned.killed == [] and abandoned.removed == []
        assert _alive(capture.qemu_pid) and capture.build.is_dir()
        await _killed(capture)  # now it is abandoned
        assert end_abandoned_builds(templates).killed == [capture.qemu_pid]
        assert await _gone(capture.qemu_pid)
