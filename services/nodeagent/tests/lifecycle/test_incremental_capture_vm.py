"""Captures of a running sandbox copy only what its guest wrote since the last one (dirty log),
from a frozen copy of the stopped guest after the call returns, and restore exactly the memory
it had at each capture."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import SNAPSHOTS
from aenv_common.errors import Internal, NotFound
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.vmm import delta
from aenv_nodeagent.vmm.frozen import COPY_NAME, FrozenCopy

from .conftest import Node, qemus_under, spec, until
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

MIB_PAGES = 256
# What a guest writes between captures with no more than a command or two run through envd.
QUIET = 16 * MIB_PAGES
# 64 MiB of guest RAM (tmpfs) where every page differs; then 16 MiB of it rewritten in place.
BLOB = "/mnt/ram/blob"
FILL = ("mkdir -p /mnt/ram && mount -t tmpfs -o size=80m ram /mnt/ram && "
        f"seq 1 99999999 | head -c 67108864 > {BLOB}; md5sum {BLOB}")
REWRITE = ("seq 50000000 99999999 | head -c 16777216 | "
           f"dd of={BLOB} bs=1M seek=8 conv=notrunc 2>/dev/null; md5sum {BLOB}")


@pytest.fixture(autouse=True)
def _capture_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aenv_nodeagent.sandbox")


async def _filled(node: Node) -> tuple[cluster_pb2.SandboxSpec, Sandbox, str]:
    """A new sandbox with the blob in its RAM; its md5sum line."""
    source = spec()
    sandbox = await node.sandboxes.creates.create(source)
    return source, sandbox, await sh(node.session, sandbox.host, source.envd_access_token, FILL)


async def _restored_blob(node: Node, snapshot: SnapshotMeta) -> str:
    """The md5sum line of the blob in a sandbox restored from `snapshot` (then killed)."""
    restored_spec = spec(template_id=snapshot.snapshot_id)
    restored = await node.sandboxes.creates.create(restored_spec)
    try:
        return await sh(node.session, restored.host, restored_spec.envd_access_token,
                        f"md5sum {BLOB}")
    finally:
        await node.sandboxes.kills.kill(restored_spec.sandbox_id)


def _copied(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """Pages copied by phase, of the last snapshot taken."""
    taken = [r for r in caplog.records if r.getMessage() == "snapshot taken"]
    fields = vars(taken[-1])
    return {key.removesuffix("_pages"): fields[key] for key in fields if key.endswith("_pages")}


async def test_each_capture_copies_what_was_written_since_the_previous_one(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    source, sandbox, filled = await _filled(node)
    token = source.envd_access_token

    first = await node.sandboxes.snapshots.create(source.sandbox_id)
    copied = _copied(caplog)
    # All of it read from a frozen copy, after the call returned.
    assert list(copied) == ["frozen"] and copied["frozen"] >= 64 * MIB_PAGES, copied

    await node.sandboxes.snapshots.create(source.sandbox_id)  # nothing written in between
    idle = sum(_copied(caplog).values())
    assert idle < QUIET, _copied(caplog)

    rewritten = await sh(node.session, sandbox.host, token, REWRITE)
    assert rewritten != filled
    third = await node.sandboxes.snapshots.create(source.sandbox_id)
    copied = _copied(caplog)
    assert 16 * MIB_PAGES <= sum(copied.values()) < 16 * MIB_PAGES + QUIET, copied

    for snapshot, expected in ((first, filled), (third, rewritten)):
        assert await _restored_blob(node, snapshot) == expected
    for snapshot in (first, third):
        await node.sandboxes.snapshots.delete(snapshot.snapshot_id)
    # Its last capture's image stays its reference, with the snapshots gone.
    assert await sh(node.session, sandbox.host, token, f"md5sum {BLOB}") == rewritten
    await node.sandboxes.snapshots.create(source.sandbox_id)
    assert sum(_copied(caplog).values()) < QUIET, _copied(caplog)
    await node.sandboxes.kills.kill(source.sandbox_id)


async def test_a_fork_child_pauses_and_captures_as_deltas_of_its_own_base(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    parent_spec, _, filled = await _filled(node)
    [result] = await node.sandboxes.forks.fork(parent_spec.sandbox_id, 1)
    assert isinstance(result, Sandbox), result
    child = result.record
    # The fork's snapshot is gone; the child maps the image pinned in its own directory.
    assert node.sandboxes.snapshots.store.listed() == []
    child_dir = node.state_dir / "sandboxes" / child.sandbox_id
    assert (child_dir / "base.memory").is_file()
    token = child.envd_access_token
    await node.sandboxes.snapshots.create(child.sandbox_id)
    assert sum(_copied(caplog).values()) < QUIET, _copied(caplog)
    await node.sandboxes.pauses.pause(child.sandbox_id)
    await node.settled()  # its memory is written as its VM quits
    assert (child_dir / "delta.state").is_file()
    resumed = await node.sandboxes.pauses.resume(child.sandbox_id)
    assert await sh(node.session, resumed.host, token, f"md5sum {BLOB}") == filled
    for sandbox_id in (child.sandbox_id, parent_spec.sandbox_id):
        await node.sandboxes.kills.kill(sandbox_id)
    for meta in node.sandboxes.snapshots.store.listed():
        await node.sandboxes.snapshots.delete(meta.snapshot_id)


@pytest.fixture
def held_builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Images made from frozen copies wait, before they start, until the event is set."""
    release = threading.Event()

    def held(*args: object) -> None:
        assert release.wait(120), "the test never released the build"
        delta.copy_sparse(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("aenv_nodeagent.memory.deferred.copy_sparse", held)
    try:
        yield release
    finally:
        release.set()


def _frozen_copies() -> list[int]:
    """This process's children that are frozen copies of a QEMU: one thread, where a QEMU
    runs several (main loop, RCU, vCPU) from its start; named so right after the fork."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                name, fields = (entry / "stat").read_text().rsplit(") ", 1)
                if (int(fields.split()[1]) == os.getpid()
                        and ("qemu" in name or COPY_NAME in name)
                        and int(fields.split()[17]) == 1):
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


async def test_what_the_guest_writes_after_the_call_is_not_in_the_snapshot(
    node: Node, held_builds: threading.Event
) -> None:
    source, sandbox, filled = await _filled(node)
    token = source.envd_access_token
    snapshot = await node.sandboxes.snapshots.create(source.sandbox_id)
    assert snapshot.image_pending and len(_frozen_copies()) == 1
    rewritten = await sh(node.session, sandbox.host, token, REWRITE)  # while it is being made
    held_builds.set()
    # The restore waits for the image, made from the guest as it was at the call.
    assert await _restored_blob(node, snapshot) == filled != rewritten
    assert not snapshot.image_pending and _frozen_copies() == []
    assert await sh(node.session, sandbox.host, token, f"md5sum {BLOB}") == rewritten
    await node.sandboxes.kills.kill(source.sandbox_id)
    await node.sandboxes.snapshots.delete(snapshot.snapshot_id)


async def test_a_snapshot_whose_frozen_copy_dies_is_dropped_and_the_next_one_is_whole(
    node: Node, held_builds: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    published = node.records.by_kind.setdefault(SNAPSHOTS, {})
    source, _, filled = await _filled(node)
    lost = await node.sandboxes.snapshots.create(source.sandbox_id)
    assert list(published) == [lost.snapshot_id]  # published once taken
    [copy] = _frozen_copies()
    os.kill(copy, 9)
    held_builds.set()
    with pytest.raises(Internal, match="cannot read the memory"):
        await node.sandboxes.snapshots.memory_image(lost.snapshot_id)
    assert node.sandboxes.snapshots.store.listed() == [] and not lost.directory.exists()
    await until(lambda: lost.snapshot_id not in published, "the record withdrawn")
    with pytest.raises(NotFound):
        await node.sandboxes.creates.create(spec(template_id=lost.snapshot_id))
    assert any(r.getMessage() == "snapshot lost: its memory image could not be written"
               for r in caplog.records)
    await asyncio.sleep(0)
    assert _frozen_copies() == []
    # The log was re-armed for nothing: the next capture reads every private page instead.
    second = await node.sandboxes.snapshots.create(source.sandbox_id)
    assert "frozen" not in _copied(caplog) and not second.image_pending
    assert await _restored_blob(node, second) == filled
    await node.sandboxes.kills.kill(source.sandbox_id)
    await node.sandboxes.snapshots.delete(second.snapshot_id)


async def test_a_restore_launches_its_vm_while_the_image_is_still_being_made(
    node: Node, held_builds: threading.Event
) -> None:
    source, _, filled = await _filled(node)
    snapshot = await node.sandboxes.snapshots.create(source.sandbox_id)
    restored_spec = spec(template_id=snapshot.snapshot_id)
    restoring = asyncio.ensure_future(node.sandboxes.creates.create(restored_spec))
    try:
        directory = node.state_dir / "sandboxes" / restored_spec.sandbox_id
        await until(lambda: bool(qemus_under(directory)), "the restore's QEMU")
        assert snapshot.image_pending and not restoring.done()
        held_builds.set()
        restored = await restoring
    finally:
        held_builds.set()
        await asyncio.gather(restoring, return_exceptions=True)
    assert await sh(node.session, restored.host, restored_spec.envd_access_token,
                    f"md5sum {BLOB}") == filled
    for sandbox_id in (restored_spec.sandbox_id, source.sandbox_id):
        await node.sandboxes.kills.kill(sandbox_id)
    await node.sandboxes.snapshots.delete(snapshot.snapshot_id)


async def test_a_restore_after_the_image_is_published_but_before_its_build_ends_uses_it(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build publishes the image, then lets go of its frozen copy: a restore in between
    (a fork's later children) finds the image complete, not its memory file half-made."""
    releasing, release = threading.Event(), threading.Event()
    let_go = FrozenCopy.release

    def held_release(copy: FrozenCopy) -> None:
        releasing.set()
        assert release.wait(120), "the test never let the copy go"
        let_go(copy)

    monkeypatch.setattr(FrozenCopy, "release", held_release)
    source, _, filled = await _filled(node)
    snapshot = await node.sandboxes.snapshots.create(source.sandbox_id)
    try:
        await until(releasing.is_set, "the build letting go of its copy")
        assert snapshot.image_pending  # its build has not ended
        assert await _restored_blob(node, snapshot) == filled
    finally:
        release.set()
    await node.sandboxes.kills.kill(source.sandbox_id)
    await node.sandboxes.snapshots.delete(snapshot.snapshot_id)


# The dying agent's making of the image is dropped unstarted, the coroutine it wraps with it.
@pytest.mark.filterwarnings("ignore:coroutine 'MemoryCapture._finish' was never awaited")
async def test_a_snapshot_whose_agent_died_before_its_image_was_made_is_made_by_the_next(
    node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent dies right as the snapshot call returns: its image's making never starts. The
    frozen copy outlives it; the next agent makes the image from it, and kills the copy that
    a capture cut short between its fork and its record left (none of its snapshots needs it)."""

    def died(_directory: Path, making: Coroutine[None, None, object]) -> None:
        making.close()  # never started: nothing of it runs

    source, sandbox, filled = await _filled(node)
    token = source.envd_access_token
    monkeypatch.setattr(node.sandboxes.context.memory_images, "build", died)
    # Nor does the eager making of the image from the capture.
    monkeypatch.setattr(node.sandboxes.context.memory_images, "ensure", lambda _stream, _dir: None)
    snapshot = await node.sandboxes.snapshots.create(source.sandbox_id)
    stray = await sandbox.vm.freeze()  # as if the agent died before it recorded this one
    rewritten = await sh(node.session, sandbox.host, token, REWRITE)  # not in the snapshot
    assert len(_frozen_copies()) == 2 and not (snapshot.directory / "memory").exists()
    restarted = await node.restart()
    assert [m.snapshot_id for m in restarted.sandboxes.snapshots.store.listed()] == [
        snapshot.snapshot_id]
    assert await _restored_blob(restarted, snapshot) == filled != rewritten
    assert not restarted.sandboxes.snapshots.store.get(snapshot.snapshot_id).image_pending
    assert _frozen_copies() == [] and not os.path.exists(f"/proc/{stray.pid}/stat")
    assert sorted(p.name for p in snapshot.directory.iterdir()) == [
        "device.state", "memory", "snapshot.json"]
    found = [r for r in caplog.records
             if r.getMessage() == "finishing memory images an earlier run left"]
    assert [(vars(r)["copies_found"], vars(r)["stray_copies_killed"]) for r in found] == [(1, 1)]
    adopted = restarted.sandboxes.registry.get(source.sandbox_id)  # the VM itself ran on
    assert await sh(node.session, adopted.host, token, f"md5sum {BLOB}") == rewritten
    await restarted.sandboxes.kills.kill(source.sandbox_id)
    await restarted.sandboxes.snapshots.delete(snapshot.snapshot_id)
    stray.release()  # gone already: closes this test's pidfd
