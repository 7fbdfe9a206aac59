"""The warm pool against real netns and real qcow2 files: it fills, hands out, refills, drains."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_nodeagent.network import EgressPolicy, NetworkConfig, NetworkManager
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_testing.subnets import free_subnet

from ..policies import egress
from .conftest import netns_with, node_parts, spec, until
from .guest import sh

pytestmark = [pytest.mark.netns]


@pytest_asyncio.fixture
async def parts() -> AsyncIterator[tuple[NetworkManager, Path, str]]:
    prefix = "awp" + "".join(secrets.choice("abcdefgh") for _ in range(3)) + "z"
    work = Path(tempfile.mkdtemp(prefix="awp", dir="/tmp"))
    network = NetworkManager(NetworkConfig(prefix=prefix, pool_cidr=free_subnet(24)))
    try:
        yield network, work, prefix
    finally:
        await network.destroy_orphans(keep=set())
        shutil.rmtree(work, ignore_errors=True)
    assert netns_with(prefix) == []


def backing_of(image: Path) -> str:
    info = subprocess.run(["qemu-img", "info", "-U", "--output=json", str(image)],
                          capture_output=True, text=True, check=True).stdout
    return str(json.loads(info)["backing-filename"])


async def test_pool_fills_hands_out_refills_and_drains(
    parts: tuple[NetworkManager, Path, str],
) -> None:
    network, work, prefix = parts
    base = work / "base.qcow2"
    made = await asyncio.create_subprocess_exec(
        "qemu-img", "create", "-q", "-f", "qcow2", str(base), "64M")
    assert await made.wait() == 0
    pool = WarmPool(network, work / "pool", slots=2, overlays_per_backing=2)
    pool.start()
    try:
        await until(lambda: pool.sizes()["slots"] == 2, "the slots")
        assert len(netns_with(prefix)) == 2
        # Overlays are pooled per backing, once something was created on it.
        await pool.take_overlay(base, work / "first.qcow2")
        assert backing_of(work / "first.qcow2") == str(base)
        await until(lambda: pool.sizes()["overlays"] == 2, "the overlays")
        await pool.take_overlay(base, work / "second.qcow2")  # a pooled one, renamed
        assert backing_of(work / "second.qcow2") == str(base)
        assert pool.sizes()["overlays"] == 1
        plain = await pool.take_slot(EgressPolicy())
        strict = await pool.take_slot(egress(allow_internet=True, deny_out=["1.1.1.1/32"]))
        assert plain.netns != strict.netns
        # Both came from the pool, which rebuilds its two in the background.
        await until(lambda: pool.sizes() == {"slots": 2, "overlays": 2, "vms": 0, "guests": 0},
                    "the refill")
        assert len(netns_with(prefix)) == 4
        await network.destroy_slot(plain)
        await network.destroy_slot(strict)
    finally:
        await pool.close()
    assert netns_with(prefix) == []
    assert list((work / "pool").iterdir()) == []
    assert pool.sizes() == {"slots": 0, "overlays": 0, "vms": 0, "guests": 0}


async def test_disabled_pool_builds_on_demand_and_keeps_nothing(
    parts: tuple[NetworkManager, Path, str],
) -> None:
    network, work, prefix = parts
    pool = WarmPool(network, work / "pool", slots=0, overlays_per_backing=0)
    pool.start()
    assert not pool.enabled
    slot = await pool.take_slot(EgressPolicy())
    assert netns_with(prefix) == [slot.netns]
    await network.destroy_slot(slot)
    await pool.close()
    assert netns_with(prefix) == []


@pytest.mark.vm
async def test_create_resume_and_fork_take_pooled_slots_and_overlays() -> None:
    async with node_parts(pool_slots=2, pool_overlays=1) as node:
        lc, pool = node.sandboxes, node.pool

        async def refilled(overlays: int) -> set[str]:
            await until(lambda: pool.sizes() == {"slots": 2, "overlays": overlays, "vms": 0,
                                            "guests": 0},
                        "refill")
            await node.settled()  # a paused sandbox's slot goes after the pause
            in_use = {sbx.slot.netns for sbx in node.sandboxes.registry.all()}
            return set(netns_with(node.prefix)) - in_use

        pooled = await refilled(0)
        first = await lc.creates.create(spec())
        assert first.slot.netns in pooled
        pooled = await refilled(1)  # the template's disk is pooled from its first create on
        pooled_overlays = set((node.state_dir / "pool").iterdir())
        second_spec = spec()
        second = await lc.creates.create(second_spec)
        assert second.slot.netns in pooled
        assert not pooled_overlays & set((node.state_dir / "pool").iterdir())  # renamed away
        await sh(node.session, second.host, second_spec.envd_access_token, "echo x > /root/x")
        await lc.pauses.pause(second_spec.sandbox_id)
        pooled = await refilled(1)
        resumed = await lc.pauses.resume(second_spec.sandbox_id)
        assert resumed.slot.netns in pooled
        assert await sh(node.session, resumed.host, second_spec.envd_access_token,
                        "cat /root/x") == "x\n"
        pooled = await refilled(1)
        results = await lc.forks.fork(first.record.sandbox_id, 2)
        registry = node.sandboxes.registry
        forked = [r for r in results if isinstance(r, Sandbox)]
        assert {registry.get(r.sandbox_id).slot.netns for r in forked} == pooled


@pytest.mark.vm
async def test_create_takes_a_prestarted_vm_that_then_lives_a_full_life() -> None:
    async with node_parts(pool_vms=1) as node:
        lc, pool = node.sandboxes, node.pool
        # The template's first create: VMs are pre-started from now on.
        await lc.creates.create(spec())
        await until(lambda: pool.sizes()["vms"] == 1, "a pre-started VM")
        [waiting] = [d for d in (node.state_dir / "sandboxes").iterdir()
                     if d.name.startswith(".pool-")]
        s = spec()
        sandbox = await lc.creates.create(s)
        assert "pooled_vm" in sandbox.timings_ms and "launch" not in sandbox.timings_ms
        assert not waiting.exists() and sandbox.directory.name == s.sandbox_id
        token = s.envd_access_token
        await sh(node.session, sandbox.host, token, "echo kept > /root/f")
        # Its disk was renamed after QEMU opened it: snapshot and pause/resume still find it.
        snapshot = await lc.snapshots.create(s.sandbox_id, "after-pool")
        # Another QEMU (a sandbox restored from the snapshot) reads the frozen layer: the pooled
        # sandbox's QEMU must have dropped its write lock on it, or its next capture aborts.
        child = spec()
        child.template_id = snapshot.snapshot_id
        restored = await lc.creates.create(child)
        assert await sh(node.session, restored.host, child.envd_access_token,
                        "cat /root/f") == "kept\n"
        await lc.snapshots.create(s.sandbox_id, "second")
        await lc.pauses.pause(s.sandbox_id)
        resumed = await lc.pauses.resume(s.sandbox_id)
        assert await sh(node.session, resumed.host, token, "cat /root/f") == "kept\n"
        await until(lambda: pool.sizes()["vms"] == 1, "the refill")


# What a sandbox may see of its guest: variables and files, without what is its own by design.
SEEN = ("env | grep -v -e '^E2B_SANDBOX_ID=' -e '^PWD=' -e '^SHLVL=' -e '^_=' | sort; "
        "ls -a /tmp /root /home/user 2>&1; cat ~root/.bash_history 2>&1 | wc -l")


@pytest.mark.vm
async def test_a_create_continues_a_woken_guest_that_keeps_nothing_of_its_warm_up() -> None:
    async with node_parts(pool_guests=2) as node:
        lc, pool = node.sandboxes, node.pool
        cold = spec(env_vars={"ROLL": "r"})
        first = await lc.creates.create(cold)  # nothing pooled yet: a restore of its own
        assert "restore" in first.timings_ms and "cont" not in first.timings_ms
        await lc.creates.create(spec())  # a second ask: the pool keeps two
        await until(lambda: pool.sizes()["guests"] == 2, "two woken guests", 300)
        await asyncio.sleep(3)  # they sit stopped: a take must set their clock
        specs = [spec(env_vars={"ROLL": "r"}) for _ in range(2)]
        woken = [await lc.creates.create(s) for s in specs]
        for sandbox, s in zip(woken, specs, strict=True):
            assert "cont" in sandbox.timings_ms
            # Its logs start with it: envd's lines of the warm-up command are not in them.
            assert "process started" not in (sandbox.directory / "console.log").read_text()
            assert not {"restore", "memory_image", "launch"} & set(sandbox.timings_ms)
            token = s.envd_access_token
            assert await sh(node.session, sandbox.host, token,
                            "echo $E2B_SANDBOX_ID") == f"{s.sandbox_id}\n"
            guest_now = float(await sh(node.session, sandbox.host, token, "date +%s.%N"))
            assert abs(guest_now - time.time()) < 5
            # Nothing of the warm-up: the same variables and files as a sandbox restored cold.
            assert (await sh(node.session, sandbox.host, token, SEEN)
                    == await sh(node.session, first.host, cold.envd_access_token, SEEN))
        # Each got its own entropy at /init, though both come from one template's state.
        draws = {await sh(node.session, w.host, s.envd_access_token,
                          "head -c 16 /dev/urandom | od -An -tx1")
                 for w, s in zip(woken, specs, strict=True)}
        assert len(draws) == 2
        assert {id(w.vm) for w in woken} != {id(first.vm)} and woken[0].vm is not woken[1].vm
        # The template changes: its woken guests go, with their QEMUs and directories.
        template = await node.templates.get(BASE_TEMPLATE) if node.templates else None
        assert template is not None
        await until(lambda: pool.sizes()["guests"] >= 1, "the refill", 300)
        await pool.forget_template(template.template_id, template.disk)
        assert pool.sizes()["guests"] == 0
        await until(lambda: not [d for d in (node.state_dir / "sandboxes").iterdir()
                                 if d.name.startswith(".pool-")], "the pool's VMs gone")


@pytest.mark.vm
async def test_a_pool_closed_while_it_wakes_a_guest_leaves_no_vm() -> None:
    async with node_parts(pool_guests=1) as node:
        pool, sandboxes = node.pool, node.state_dir / "sandboxes"
        await node.sandboxes.creates.create(spec())  # asks the pool for a woken guest

        def waking() -> list[Path]:
            return [d for d in sandboxes.iterdir() if d.name.startswith(".pool-")]

        def launched() -> list[Path]:
            return [d / "vm" / "qemu.pid" for d in waking() if (d / "vm" / "qemu.pid").exists()]

        await until(lambda: bool(launched()), "a guest being woken", 120)
        assert pool.sizes()["guests"] == 0  # not woken yet: the close cuts its wake short
        qemu = int(launched()[0].read_text())
        await pool.close()
        assert waking() == [] and pool.sizes()["guests"] == 0
        await until(lambda: not Path(f"/proc/{qemu}").exists(), "its QEMU gone", 30)
