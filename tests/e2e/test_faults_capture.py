"""A node agent SIGKILLed while it captures a template (the code interpreter's, prewarmed into a
templates folder of its own, so it must capture): the capture's QEMU outlives it, and the
restarted agent's recovery ends that QEMU and removes its `.build-*` folder (before, it ran on,
managed by nobody, until the host rebooted)."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest

from aenv_nodeagent.vmm.process import qemu_owning

from ..conftest import lone_platform_env, running_platform

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

CAPTURE_STARTS_S = 300.0  # the base template's capture comes first, under TCG


def _captures(templates: Path) -> dict[Path, int]:
    """The capture folders whose QEMU runs: folder -> its QEMU's pid."""
    running = {}
    for pidfile in templates.glob("*/.build-*/vm/qemu.pid"):
        if (pid := qemu_owning(pidfile)) is not None:
            running[pidfile.parents[1]] = pid
    return running


async def test_a_capture_cut_short_by_a_crash_is_ended_by_the_next_start(tmp_path: Path) -> None:
    prefix = "aec" + secrets.token_hex(2) + "x"
    templates = tmp_path / "home" / "templates"
    env = lone_platform_env(
        prefix,
        AENV_NODEAGENT_TEMPLATES_DIR=str(templates),
        AENV_NODEAGENT_WARM_POOL_VMS="0",
        AENV_NODEAGENT_WARM_POOL_GUESTS="0",
        AENV_NODEAGENT_PREWARM_CODE_INTERPRETER="true",
    )
    async with running_platform(tmp_path / "home", env, prefix) as platform:
        deadline = time.monotonic() + CAPTURE_STARTS_S
        while not (under_way := _captures(templates)):
            assert time.monotonic() < deadline, "no capture started"
            await asyncio.sleep(0.2)

        async with platform.service_down("nodeagent", crash=True):
            (folder, pid), *_ = under_way.items()
            assert _captures(templates).get(folder) == pid  # outlived its agent
        # The restarted agent's recovery ended it (and may capture afresh in a new folder).
        assert not folder.exists()
        assert qemu_owning(folder / "vm" / "qemu.pid") is None
        assert not Path(f"/proc/{pid}").exists() or _zombie_or_gone(pid)


def _zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
