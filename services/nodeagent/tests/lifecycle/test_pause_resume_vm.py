"""Pause/resume with real VMs: processes, their memory, files and the id survive; clock is set."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Conflict
from aenv_nodeagent.memory.images import BASE_MEMORY, HOT_PAGES
from aenv_nodeagent.memory.paused import PendingDelta
from aenv_nodeagent.vmm.hot_pages import read_runs

from .conftest import Node, netns_with, qemus_under, spec
from .guest import counter, sh, start_counter

pytestmark = [pytest.mark.vm, pytest.mark.netns]


async def test_process_memory_files_and_id_survive_pause_resume_cycles(node: Node) -> None:
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    token = s.envd_access_token
    await start_counter(node.session, sandbox.host, token)
    await sh(node.session, sandbox.host, token, "echo kept > /root/file")
    for _ in range(2):
        pid, before = await counter(node.session, sandbox.host, token)
        record = await node.sandboxes.pauses.pause(s.sandbox_id)
        assert record.state == cluster_pb2.SANDBOX_STATE_PAUSED
        assert node.records.records[s.sandbox_id].state == cluster_pb2.SANDBOX_STATE_PAUSED
        await node.settled()  # the slot goes after the pause returned
        assert qemus_under(node.state_dir) == [] and netns_with(node.prefix) == []
        # What the guest read of its base is kept beside the delta, for the resume to read ahead.
        directory = node.state_dir / "sandboxes" / s.sandbox_id
        hot, size = read_runs(directory / HOT_PAGES), (directory / BASE_MEMORY).stat().st_size
        assert hot and all(offset + length <= size for offset, length in hot)
        with pytest.raises(Conflict):
            await node.sandboxes.pauses.pause(s.sandbox_id)
        await asyncio.sleep(1.5)  # the guest clock must not lose the paused time
        sandbox = await node.sandboxes.pauses.resume(s.sandbox_id, timeout_s=60)
        assert sandbox.record.sandbox_id == s.sandbox_id
        assert node.records.records[s.sandbox_id].state == cluster_pb2.SANDBOX_STATE_RUNNING
        assert await sh(node.session, sandbox.host, token, "cat /root/file") == "kept\n"
        asked = time.time()
        guest_now = float(await sh(node.session, sandbox.host, token, "date +%s.%N"))
        assert asked - 1 < guest_now < time.time() + 1  # within the command's round trip
        await asyncio.sleep(2.2)  # > one counter tick
        after_pid, after = await counter(node.session, sandbox.host, token)
        assert after_pid == pid and after > before  # the same process kept counting


async def test_corrupt_or_missing_state_keeps_the_sandbox_paused(node: Node) -> None:
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    await sh(node.session, sandbox.host, s.envd_access_token, "echo kept > /root/file")
    await node.sandboxes.pauses.pause(s.sandbox_id)
    await node.settled()  # its memory is written as its VM quits
    # A delta capture onto the template's memory, pinned in the sandbox's directory.
    delta, base = sandbox.directory / "delta.state", sandbox.directory / "base.memory"
    assert delta.is_file() and base.is_file() and not (sandbox.directory / "memory").exists()
    good = delta.with_suffix(".good")
    shutil.copyfile(delta, good)
    with delta.open("r+b") as fh:
        fh.seek(64)
        fh.write(b"\xff" * 4096)
    with pytest.raises(AenvError, match="stays paused"):
        await node.sandboxes.pauses.resume(s.sandbox_id)
    good.rename(delta)
    base.rename(base.with_suffix(".away"))  # the memory the delta builds on is gone
    with pytest.raises(AenvError, match="stays paused"):
        await node.sandboxes.pauses.resume(s.sandbox_id)
    assert node.sandboxes.registry.record(s.sandbox_id).state == cluster_pb2.SANDBOX_STATE_PAUSED
    await node.settled()
    assert qemus_under(node.state_dir) == [] and netns_with(node.prefix) == []
    base.with_suffix(".away").rename(base)
    sandbox = await node.sandboxes.pauses.resume(s.sandbox_id)
    assert await sh(node.session, sandbox.host, s.envd_access_token, "cat /root/file") == "kept\n"
    assert not delta.exists()  # loaded: only the base it maps stays


async def test_timeout_pauses_when_asked(node: Node) -> None:
    s = spec(timeout_seconds=1, lifecycle=cluster_pb2.Lifecycle(auto_pause=True))
    await node.sandboxes.creates.create(s)
    end = node.records.records[s.sandbox_id].end_at.ToNanoseconds() / 1e9

    node.allocation.delay_s = 0.3  # a node record put that takes its time (etcd, loaded)
    seen: list[int] = []

    async def look_up_throughout() -> None:  # what GetSandbox answers while the pause runs
        while not seen or seen[-1] != cluster_pb2.SANDBOX_STATE_PAUSED:
            seen.append(node.sandboxes.registry.record(s.sandbox_id).state)
            assert [r.sandbox_id for r in node.sandboxes.registry.records()] == [s.sandbox_id]
            await asyncio.sleep(0.005)

    looking = asyncio.create_task(look_up_throughout())
    assert await node.sandboxes.kills.expire_due(now=end + 0.1) == [s.sandbox_id]
    await asyncio.wait_for(looking, 5)  # it never saw the sandbox missing (NotFound)
    assert node.sandboxes.registry.record(s.sandbox_id).state == cluster_pb2.SANDBOX_STATE_PAUSED


async def test_restart_keeps_paused_sandboxes_and_snapshots(node: Node) -> None:
    paused_spec, running_spec = spec(), spec()
    sandbox = await node.sandboxes.creates.create(paused_spec)
    await sh(node.session, sandbox.host, paused_spec.envd_access_token, "echo paused > /root/f")
    await node.sandboxes.pauses.pause(paused_spec.sandbox_id)
    running = await node.sandboxes.creates.create(running_spec)
    await sh(node.session, running.host, running_spec.envd_access_token, "echo kept > /root/f")
    snapshot = await node.sandboxes.snapshots.create(running_spec.sandbox_id, "s1")
    # The agent dies: its VMs keep running, nothing is cleaned up, and a delta capture and a
    # split cut short left their partial files. A new one starts.
    await node.settled()  # its memory is written as its VM quits
    assert (sandbox.directory / "delta.state").is_file()
    leftovers = [sandbox.directory / name for name in ("delta.state.part", "memory.part")]
    for leftover in leftovers:
        leftover.write_bytes(b"cut short")
    restarted = await node.restart()
    # The running sandbox was re-adopted: same VM, same slot, and it keeps working.
    assert node.records.records[running_spec.sandbox_id].state == (
        cluster_pb2.SANDBOX_STATE_RUNNING)
    adopted = restarted.sandboxes.registry.get(running_spec.sandbox_id)
    assert adopted.vm.pid == running.vm.pid and adopted.slot == running.slot
    assert await sh(node.session, adopted.host, running_spec.envd_access_token,
                    "cat /root/f") == "kept\n"
    assert restarted.sandboxes.registry.paused_ids() == [paused_spec.sandbox_id]
    assert [m.snapshot_id for m in restarted.sandboxes.snapshots.store.listed()] == [
        snapshot.snapshot_id]
    assert len(qemus_under(node.state_dir)) == 1 and len(netns_with(node.prefix)) == 1
    assert not any(leftover.exists() for leftover in leftovers)
    resumed = await restarted.sandboxes.pauses.resume(paused_spec.sandbox_id)
    token = paused_spec.envd_access_token
    assert await sh(node.session, resumed.host, token, "cat /root/f") == "paused\n"
    child = spec()
    child.template_id = snapshot.snapshot_id
    restored = await restarted.sandboxes.creates.create(child)
    assert await sh(node.session, restored.host, child.envd_access_token, "cat /root/f") == "kept\n"
    # The adopted sandbox's disk chain was read back from QEMU: it snapshots, and its frozen
    # layer (shared with the snapshot restored above) survived the restart.
    await sh(node.session, adopted.host, running_spec.envd_access_token, "echo v2 > /root/f")
    second = await restarted.sandboxes.snapshots.create(running_spec.sandbox_id, "s2")
    assert second.layers[1:] == snapshot.layers
    # Its RAM was captured whole (what its dirty log missed is unknown); the next capture takes
    # only what it wrote since, onto that one.
    await sh(node.session, adopted.host, running_spec.envd_access_token, "echo v3 > /run/m")
    third = await restarted.sandboxes.snapshots.create(running_spec.sandbox_id, "s3")
    await restarted.sandboxes.kills.kill(running_spec.sandbox_id)
    for taken, script, expected in ((second, "cat /root/f", "v2\n"),
                                    (third, "cat /root/f /run/m", "v2\nv3\n")):
        child = spec()
        child.template_id = taken.snapshot_id
        restored = await restarted.sandboxes.creates.create(child)
        assert await sh(node.session, restored.host, child.envd_access_token, script) == expected


async def test_a_kill_right_after_a_pause_waits_for_its_vm_to_quit(node: Node) -> None:
    """A pause leaves its QEMU to quit in the background; a kill at once still ends with it
    gone before its files are, and nothing left."""
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    qemu = Path(f"/proc/{sandbox.vm.pid}")
    await node.sandboxes.pauses.pause(s.sandbox_id)
    await node.sandboxes.kills.kill(s.sandbox_id)
    assert not qemu.exists() and not sandbox.directory.exists()
    await node.settled()
    assert qemus_under(node.state_dir) == [] and netns_with(node.prefix) == []
    assert s.sandbox_id not in node.records.records


async def test_a_pause_whose_agent_died_before_its_memory_was_written_keeps_it(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause returns before the guest's memory is written; the agent dies right then (no
    background work at all). The next agent's recovery writes it from the QEMU, still stopped,
    before it kills that QEMU."""
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    token = s.envd_access_token
    await start_counter(node.session, sandbox.host, token)
    await sh(node.session, sandbox.host, token, "echo in-ram > /run/m")
    pid, before = await counter(node.session, sandbox.host, token)

    def died(_sandbox: object, delta: PendingDelta | None) -> None:
        assert delta is not None
        delta.close()

    monkeypatch.setattr(node.sandboxes.pauses, "_quit_soon", died)
    await node.sandboxes.pauses.pause(s.sandbox_id)
    assert not (sandbox.directory / "delta.state").exists()
    assert len(qemus_under(node.state_dir)) == 1  # stopped, its memory not yet written
    restarted = await node.restart()
    assert (sandbox.directory / "delta.state").is_file()
    assert not (sandbox.directory / "devices.state").exists()
    assert qemus_under(node.state_dir) == [] and netns_with(node.prefix) == []
    resumed = await restarted.sandboxes.pauses.resume(s.sandbox_id)
    assert await sh(node.session, resumed.host, token, "cat /run/m") == "in-ram\n"
    await asyncio.sleep(2.2)  # > one counter tick
    after_pid, after = await counter(node.session, resumed.host, token)
    assert after_pid == pid and after > before
