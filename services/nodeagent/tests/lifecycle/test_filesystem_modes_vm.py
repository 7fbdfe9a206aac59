"""Filesystem-only pause and snapshot with real VMs: the flushed disk survives, memory does not;
resuming or creating from them cold-boots under the same identity."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2

from .conftest import Node, netns_with, qemus_under, spec
from .guest import sh, start_counter

pytestmark = [pytest.mark.vm, pytest.mark.netns]

# Only in the page cache when the capture starts: the pause must flush it to the disk layer.
WRITE = "echo kept > /root/file"
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


async def test_filesystem_pause_and_snapshot_keep_files_and_cold_boot(node: Node) -> None:
    s = spec()
    token = s.envd_access_token
    sandbox = await node.sandboxes.creates.create(s)
    await start_counter(node.session, sandbox.host, token)
    await sh(node.session, sandbox.host, token, WRITE)
    first_boot = await sh(node.session, sandbox.host, token, BOOT_ID)

    record = await node.sandboxes.pauses.pause(s.sandbox_id, cluster_pb2.PAUSE_MODE_FILESYSTEM)
    assert record.pause_mode == cluster_pb2.PAUSE_MODE_FILESYSTEM
    assert not (sandbox.directory / "paused.state").exists()  # no memory kept
    await node.settled()
    assert qemus_under(node.state_dir) == [] and netns_with(node.prefix) == []

    sandbox = await node.sandboxes.pauses.resume(s.sandbox_id)  # a cold boot, same id and token
    assert sandbox.record.pause_mode == cluster_pb2.PAUSE_MODE_UNSPECIFIED
    assert await sh(node.session, sandbox.host, token, "cat /root/file") == "kept\n"
    # A new boot: the counter process (memory only) is gone.
    assert await sh(node.session, sandbox.host, token, BOOT_ID) != first_boot
    assert await sh(node.session, sandbox.host, token,
                    "pgrep -f 'read [s] < /tmp/step' || echo none") == "none\n"

    await sh(node.session, sandbox.host, token, "echo snapped > /root/file")
    snapshot = await node.sandboxes.snapshots.create(s.sandbox_id, "fs", filesystem_only=True)
    assert not snapshot.has_memory and not snapshot.state.exists()
    await sh(node.session, sandbox.host, token, "echo later > /root/file")  # parent continues
    child = spec()
    child.template_id = snapshot.snapshot_id
    restored = await node.sandboxes.creates.create(child)
    assert await sh(node.session, restored.host, child.envd_access_token,
                    "cat /root/file") == "snapped\n"
    assert await sh(node.session, sandbox.host, token, "cat /root/file") == "later\n"

    # A cold-booted guest maps no memory image: its pause is a full capture, made into its own
    # image; the next pause is a delta onto that image.
    await sh(node.session, sandbox.host, token, "echo in-memory > /run/m")
    await node.sandboxes.pauses.pause(s.sandbox_id)
    assert not (sandbox.directory / "delta.state").exists()
    sandbox = await node.sandboxes.pauses.resume(s.sandbox_id)
    assert await sh(node.session, sandbox.host, token, "cat /run/m /root/file") == (
        "in-memory\nlater\n")
    await node.sandboxes.pauses.pause(s.sandbox_id)
    await node.settled()  # its memory is written as its VM quits
    assert (sandbox.directory / "delta.state").is_file()
    assert not (sandbox.directory / "memory").exists()  # pinned as base.memory
    sandbox = await node.sandboxes.pauses.resume(s.sandbox_id)
    assert await sh(node.session, sandbox.host, token, "cat /run/m") == "in-memory\n"
    # A full pause can still be resumed by a reboot (`on_resume="reboot"`): memory is dropped.
    await node.sandboxes.pauses.pause(s.sandbox_id)
    rebooted = await node.sandboxes.pauses.resume(s.sandbox_id, reboot=True)
    assert await sh(node.session, rebooted.host, token, "cat /root/file") == "later\n"
    assert not any((rebooted.directory / name).exists() for name in (
        "paused.state", "delta.state", "base.memory", "memory"))
