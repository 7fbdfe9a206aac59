"""A node agent crash loses nothing: its successor re-adopts the running VMs, and the SDK's
sandbox objects keep working, the guest's processes never having stopped; a snapshot whose memory
image the crash cut short is made by the successor. Creates the crash cuts short leave nothing
that no client knows of."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from e2b import ALL_TRAFFIC, Sandbox, SandboxNetworkOpts

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_nodeagent.network.namespaces import pids_in_netns
from aenv_nodeagent.pool import VM_DIR_PREFIX
from aenv_nodeagent.vmm.process import qemu_owning

from ..conftest import netns_names, qemu_pids_under
from .conftest import COUNTER, counter, until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

# A policy naming hosts: the successor must enforce it again (slot re-attached to its egress
# process) and the record must keep it exactly.
NAMED: SandboxNetworkOpts = {"allow_out": ["api.example.com", "*.pkg.example"],
                             "deny_out": [ALL_TRAFFIC, "tracker.example"]}


@pytest.fixture
def sandbox(sdk_env: None) -> Iterator[Sandbox]:
    made = Sandbox.create(timeout=300, network=NAMED)
    try:
        yield made
    finally:
        Sandbox.kill(made.sandbox_id)


async def test_running_sandboxes_outlive_a_node_agent_crash(
    platform: Platform, sandbox: Sandbox
) -> None:
    await asyncio.to_thread(sandbox.commands.run, COUNTER, background=True)
    await asyncio.to_thread(sandbox.files.write, "/home/user/kept", "before the crash")
    await asyncio.sleep(1.2)
    before = await asyncio.to_thread(counter, sandbox)

    crashed_at = time.monotonic()
    await platform.restart_service("nodeagent", crash=True)
    down_s = time.monotonic() - crashed_at

    assert await asyncio.to_thread(sandbox.files.read, "/home/user/kept") == "before the crash"
    after = await asyncio.to_thread(counter, sandbox)
    # The same counting process went on while the agent was down (one tick per 0.5 s).
    assert after >= before + int(down_s / 0.5) - 1, (before, after, down_s)
    info = await asyncio.to_thread(Sandbox.get_info, sandbox.sandbox_id)
    assert info.state.value == "running"
    assert info.network is not None
    assert (info.network["allow_out"], info.network["deny_out"]) == (
        NAMED["allow_out"], NAMED["deny_out"])
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
             for line in (logs / name).read_text().splitlines()
             if snapshot.snapshot_id.removesuffix(":default") in line]  # the E2B id's own
    assert any("snapshot image written" in line
               or "finishing memory images an earlier run left" in line for line in lines)
    assert not any("snapshot lost" in line for line in lines)
    assert await asyncio.to_thread(Sandbox.delete_snapshot, snapshot.snapshot_id) is True


CONCURRENT_CREATES = 8


async def test_creates_cut_by_a_node_agent_crash_leave_nothing_no_client_knows(
    platform: Platform, sdk_env: None, net_prefix: str
) -> None:
    before = await _node_state(platform, net_prefix)
    creates = [asyncio.ensure_future(asyncio.to_thread(_create_or_error))
               for _ in range(CONCURRENT_CREATES)]
    # The crash lands as the creates publish their records: some made and published but not
    # answered yet (the successor adopts those), others still being made.
    async def one_published() -> bool:
        return bool((await _node_state(platform, net_prefix)).records - before.records)
    await until(one_published, 120, "a create to publish its record")
    await platform.restart_service("nodeagent", crash=True)
    outcomes = await asyncio.gather(*creates)
    made = {o.sandbox_id for o in outcomes if isinstance(o, Sandbox)}
    try:
        # Every sandbox VM, netns and record is one a client holds (the gateway kills those of
        # the creates it gave up on once the node agent answers again: wait for that).
        async def only_known() -> bool:
            now = await _node_state(platform, net_prefix)
            return (now.vm_dirs - before.vm_dirs == made and now.records - before.records == made
                    and now.listed - before.listed == made and now.clean)
        await until(only_known, 120, f"only the sandboxes clients got ({outcomes})")
        for sandbox_id in made:  # and they work
            sandbox = await asyncio.to_thread(Sandbox.connect, sandbox_id)
            assert (await asyncio.to_thread(sandbox.commands.run, "echo ok")).stdout == "ok\n"
    finally:
        for sandbox_id in made:
            await asyncio.to_thread(Sandbox.kill, sandbox_id)

    async def as_before() -> bool:
        now = await _node_state(platform, net_prefix)
        return now.settled_like(before)
    await until(as_before, 120, "the node as before the creates: no VM, netns or record left")


def _create_or_error() -> Sandbox | Exception:
    try:
        return Sandbox.create(timeout=300)
    except Exception as err:  # the crash may fail it: what counts is what is left
        return err


# The warm pool keeps this many network slots built ahead, with no VM in them (the default).
POOL_SLOTS = 4


@dataclass(frozen=True)
class _NodeState:
    vm_dirs: set[str]  # sandbox VMs, by directory (warm-pool VMs apart)
    unowned_vms: int  # QEMUs under the state dir that hold no sandbox's or pool's pidfile
    idle_netns: int  # the prefix's netns no process runs in
    records: set[str]  # running sandboxes' records in etcd
    listed: set[str]  # the API's list

    def settled_like(self, other: _NodeState) -> bool:
        return (self.vm_dirs, self.records, self.listed) == (
            other.vm_dirs, other.records, other.listed) and self.clean

    @property
    def clean(self) -> bool:
        return self.unowned_vms == 0 and self.idle_netns <= POOL_SLOTS


async def _node_state(platform: Platform, net_prefix: str) -> _NodeState:
    sandboxes_dir = platform.home / "nodeagent" / "sandboxes"
    owned = {pidfile.parent.parent.name for pidfile in sandboxes_dir.glob("*/vm/qemu.pid")
             if qemu_owning(pidfile) is not None}
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=platform.etcd_endpoints))
    try:
        records = {r.sandbox_id for r in await store.list_sandboxes()
                   if r.state == cluster_pb2.SANDBOX_STATE_RUNNING}
    finally:
        await store.close()
    async with GatewayClient.for_home(platform.home) as client:
        listed = {r.sandbox_id for r in await client.list_sandboxes()}
    names = netns_names(net_prefix)
    idle = sum(1 for name in names if not pids_in_netns([name]))
    return _NodeState({d for d in owned if not d.startswith(VM_DIR_PREFIX)},
                      len(qemu_pids_under(sandboxes_dir)) - len(owned), idle, records, listed)
