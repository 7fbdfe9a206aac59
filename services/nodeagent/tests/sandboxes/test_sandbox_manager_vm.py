"""Creates from templates against real parts: QEMU restores of the real `base` template, real
netns slots and the real envd in the guest. Records go to an in-memory sink (etcd has its own
tests and the end-to-end tests use it)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, InvalidArgument, NotFound
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.envd_client import EnvdClient, guest_session
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import QemuDriver, detect_accelerator
from aenv_testing.records import MemoryRecords
from aenv_testing.subnets import free_subnet

pytestmark = [pytest.mark.vm, pytest.mark.netns]


def _netns(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


Env = tuple[SandboxWing, MemoryRecords, str, TemplateStore]


@pytest_asyncio.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    prefix = "ast" + "".join(secrets.choice("abcdefgh") for _ in range(3)) + "z"
    settings = NodeAgentSettings(state_dir=tmp_path / "state")
    network = NetworkManager(NetworkConfig(prefix=prefix, pool_cidr=free_subnet(24)))
    async with guest_session() as session:
        envd = EnvdClient(session)
        templates = TemplateStore(settings.resolved_templates_dir(), network, envd,
                                  QemuDriver(), GuestCommands(session),
                                  boot_timeout_s=90, boot_attempts=3)
        templates.register(await base_template_inputs(settings, detect_accelerator(None)))
        records = MemoryRecords()
        manager = SandboxWing(WingContext.of(
            SandboxSettings(settings.resolved_state_dir(), ready_timeout_s=60),
            SandboxRegistry("test-node"), records, templates, network, envd), QemuDriver())
        try:
            yield manager, records, prefix, templates
        finally:
            await manager.stop()
            await network.destroy_orphans(keep=set())
    assert _netns(prefix) == []


def _spec(**kw: object) -> cluster_pb2.SandboxSpec:
    spec = cluster_pb2.SandboxSpec(sandbox_id=new_sandbox_id(), template_id=BASE_TEMPLATE,
                                   envd_access_token=new_secret())
    for key, value in kw.items():
        setattr(spec, key, value)
    return spec


async def test_create_restores_and_kill_removes_everything(env: Env) -> None:
    manager, records, prefix, _ = env
    spec = _spec()
    spec.env_vars["FOO"] = "bar"
    sandbox = await manager.creates.create(spec)
    assert records.records[spec.sandbox_id].state == cluster_pb2.SANDBOX_STATE_RUNNING
    assert records.records[spec.sandbox_id].envd_version
    # Host-side phases are measured for every create; a create never cold-boots.
    assert {"network", "overlay", "launch", "restore", "envd_init"} <= set(sandbox.timings_ms)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{sandbox.host}:49983/envs",
                               headers={"X-Access-Token": spec.envd_access_token}) as resp:
            assert resp.status == 200
            assert (await resp.json())["FOO"] == "bar"
    assert len(_netns(prefix)) == 1
    directory, pid = sandbox.directory, sandbox.vm.pid
    await manager.kills.kill(spec.sandbox_id)
    assert spec.sandbox_id not in records.records
    assert not directory.exists()
    assert _netns(prefix) == []
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(NotFound):
        await manager.kills.kill(spec.sandbox_id)


async def test_failed_restore_leaks_nothing(env: Env, tmp_path: Path) -> None:
    """A restore that fails at its last QEMU step (a corrupt device state) undoes every step
    before it: VM, slot, directory, record."""
    manager, records, prefix, templates = env
    good = await templates.get(BASE_TEMPLATE)
    broken_dir = tmp_path / "broken-template"
    shutil.copytree(good.directory, broken_dir, copy_function=os.link)
    (broken_dir / "state").unlink()
    (broken_dir / "state").write_bytes(b"QEVM garbage")
    templates._ready[BASE_TEMPLATE] = replace(good, directory=broken_dir)
    spec = _spec()
    with pytest.raises(AenvError):
        await manager.creates.create(spec)
    assert manager.registry.all() == []
    assert records.records == {}
    assert _netns(prefix) == []
    assert not (tmp_path / "state" / "sandboxes" / spec.sandbox_id).exists()


async def test_bad_specs_are_rejected_before_any_work(env: Env) -> None:
    manager, _, prefix, _ = env
    with pytest.raises(InvalidArgument):
        await manager.creates.create(_spec(sandbox_id="Bad-Id"))
    with pytest.raises(NotFound):
        await manager.creates.create(_spec(template_id="nope"))
    assert _netns(prefix) == []


async def test_expired_sandboxes_are_killed(env: Env) -> None:
    manager, records, _, _ = env
    spec = _spec(timeout_seconds=1)
    await manager.creates.create(spec)
    end = records.records[spec.sandbox_id].end_at.ToNanoseconds() / 1e9
    assert await manager.kills.expire_due(now=end - 0.5) == []
    assert await manager.kills.expire_due(now=end + 0.1) == [spec.sandbox_id]
    assert manager.registry.all() == []
