"""Pause, resume, snapshot, fork and reset through the public APIs, proven with the official E2B
SDK against the real platform: pause/resume keeps processes and files, snapshots (list, create
from, delete), fork, auto-resume on traffic after an auto-pause, and the native gRPC reset."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from e2b import Sandbox
from e2b.exceptions import SandboxNotRunningException

from aenv_cli.platform import Platform

from .conftest import COUNTER, counter, grpc_reset

# Plain (sync) tests: they drive the platform the way a user's program does, from outside.
pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

def _created(made: list[str], **kwargs: object) -> Sandbox:
    sandbox = Sandbox.create(timeout=300, **kwargs)  # type: ignore[arg-type]
    made.append(sandbox.sandbox_id)
    return sandbox


def _eventually(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        time.sleep(0.5)


def test_pause_and_connect_keep_processes_and_files(sandboxes: list[str]) -> None:
    sandbox = _created(sandboxes)
    sandbox.files.write("/tmp/kept", "kept across pauses")
    sandbox.commands.run(COUNTER, background=True)
    _eventually(lambda: sandbox.files.exists("/tmp/counter"), 30, "the counter started")
    for _ in range(2):
        before = counter(sandbox)
        assert sandbox.pause() is True
        assert sandbox.pause() is False  # already paused: the API answers 409
        assert sandbox.get_info().state == "paused"
        with pytest.raises(SandboxNotRunningException):
            sandbox.files.read("/tmp/kept")
        sandbox = Sandbox.connect(sandbox.sandbox_id)
        assert sandbox.get_info().state == "running"
        # The same process continues: the count goes on from where it was, it does not restart.
        resumed_at = counter(sandbox)
        assert resumed_at >= before
        _eventually(lambda s=sandbox, n=resumed_at: counter(s) > n, 30,  # type: ignore[misc]
                    "the counter keeps counting")
        assert sandbox.files.read("/tmp/kept") == "kept across pauses"


def test_filesystem_modes_keep_files_and_cold_boot(sandboxes: list[str]) -> None:
    """`pause(mode="filesystem")`, `connect(on_resume="reboot")` and
    `create_snapshot(mode="filesystem")`: files survive, processes do not (a fresh boot)."""
    sandbox = _created(sandboxes)
    boot_id = "cat /proc/sys/kernel/random/boot_id"
    first_boot = sandbox.commands.run(boot_id).stdout
    sandbox.files.write("/home/user/kept", "on disk")
    assert sandbox.pause(mode="filesystem") is True
    assert sandbox.get_info().state == "paused"
    sandbox = Sandbox.connect(sandbox.sandbox_id)
    second_boot = sandbox.commands.run(boot_id).stdout
    assert second_boot != first_boot
    assert sandbox.files.read("/home/user/kept") == "on disk"
    snapshot = sandbox.create_snapshot(mode="filesystem")
    child = _created(sandboxes, template=snapshot.snapshot_id)
    assert child.files.read("/home/user/kept") == "on disk"
    assert child.commands.run(boot_id).stdout not in (first_boot, second_boot)
    assert sandbox.pause() is True  # full, then resumed by a reboot anyway
    sandbox = Sandbox.connect(sandbox.sandbox_id, on_resume="reboot")
    assert sandbox.commands.run(boot_id).stdout != second_boot
    assert sandbox.files.read("/home/user/kept") == "on disk"
    Sandbox.delete_snapshot(snapshot.snapshot_id)


def test_snapshot_create_from_reset_and_delete(
    sandboxes: list[str], platform: Platform
) -> None:
    source = _created(sandboxes)
    source.files.write("/tmp/before", "captured")
    snapshot = source.create_snapshot()
    source.files.write("/tmp/after", "not captured")
    assert source.get_info().state == "running"

    listed = Sandbox.list_snapshots(sandbox_id=source.sandbox_id).next_items()
    assert snapshot.snapshot_id in {s.snapshot_id for s in listed}

    child = _created(sandboxes, template=snapshot.snapshot_id)
    assert child.sandbox_id != source.sandbox_id
    assert child.files.read("/tmp/before") == "captured"
    assert not child.files.exists("/tmp/after")

    # The native gRPC API rewinds the source in place: same id, state of the snapshot.
    reset = asyncio.run(grpc_reset(platform, source.sandbox_id, snapshot.snapshot_id))
    assert reset.sandbox_id == source.sandbox_id
    assert source.files.read("/tmp/before") == "captured"
    assert not source.files.exists("/tmp/after")

    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False
    remaining = Sandbox.list_snapshots(sandbox_id=source.sandbox_id).next_items()
    assert snapshot.snapshot_id not in {s.snapshot_id for s in remaining}
    # Sandboxes made from a deleted snapshot keep their disk.
    assert child.files.read("/tmp/before") == "captured"


def test_fork_children_share_the_past_not_the_future(sandboxes: list[str]) -> None:
    parent = _created(sandboxes)
    parent.files.write("/tmp/parent", "from the parent")
    children = parent.fork(count=2, timeout=120)
    for child in children:
        assert isinstance(child, Sandbox), child
        sandboxes.append(child.sandbox_id)
    first, second = (c for c in children if isinstance(c, Sandbox))
    for child in (first, second):
        assert child.files.read("/tmp/parent") == "from the parent"
    first.files.write("/tmp/mine", "first child only")
    assert not second.files.exists("/tmp/mine")
    assert not parent.files.exists("/tmp/mine")
    assert parent.is_running()
    assert parent.get_info().state == "running"


def test_auto_paused_sandbox_resumes_on_traffic(sandboxes: list[str]) -> None:
    sandbox = _created(sandboxes, lifecycle={"on_timeout": "pause", "auto_resume": True})
    sandbox.files.write("/tmp/kept", "still here")
    sandbox.set_timeout(2)
    _eventually(lambda: sandbox.get_info().state == "paused", 90, "the timeout paused it")
    # Data-plane traffic alone brings it back.
    assert sandbox.files.read("/tmp/kept") == "still here"
    assert sandbox.get_info().state == "running"
    assert sandbox.commands.run("echo alive").stdout.strip() == "alive"
