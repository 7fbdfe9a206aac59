"""Captures of a running sandbox copy only what its guest wrote since the last one (dirty log),
and restore exactly the memory it had at each capture."""

from __future__ import annotations

import logging

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.sandboxes import Sandbox

from .conftest import Node, spec
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
    caplog.set_level(logging.INFO, logger="aenv_nodeagent.lifecycle")


async def _filled(node: Node) -> tuple[cluster_pb2.SandboxSpec, Sandbox, str]:
    """A new sandbox with the blob in its RAM; its md5sum line."""
    source = spec()
    sandbox = await node.lifecycle.create(source)
    return source, sandbox, await sh(node.session, sandbox.host, source.envd_access_token, FILL)


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

    first = await node.lifecycle.create_snapshot(source.sandbox_id)
    copied = _copied(caplog)
    assert sum(copied.values()) >= 64 * MIB_PAGES, copied
    assert copied["stopped"] < QUIET, copied  # the rest was copied while it ran

    await node.lifecycle.create_snapshot(source.sandbox_id)  # nothing written in between
    idle = sum(_copied(caplog).values())
    assert idle < QUIET, _copied(caplog)

    rewritten = await sh(node.session, sandbox.host, token, REWRITE)
    assert rewritten != filled
    third = await node.lifecycle.create_snapshot(source.sandbox_id)
    copied = _copied(caplog)
    assert 16 * MIB_PAGES <= sum(copied.values()) < 16 * MIB_PAGES + QUIET, copied

    for snapshot, expected in ((first, filled), (third, rewritten)):
        restored_spec = spec(template_id=snapshot.snapshot_id)
        restored = await node.lifecycle.create(restored_spec)
        assert await sh(node.session, restored.host, restored_spec.envd_access_token,
                        f"md5sum {BLOB}") == expected
        await node.lifecycle.kill(restored_spec.sandbox_id)
    for snapshot in (first, third):
        await node.lifecycle.delete_snapshot(snapshot.snapshot_id)
    # Its last capture's image stays its reference, with the snapshots gone.
    assert await sh(node.session, sandbox.host, token, f"md5sum {BLOB}") == rewritten
    await node.lifecycle.create_snapshot(source.sandbox_id)
    assert sum(_copied(caplog).values()) < QUIET, _copied(caplog)
    await node.lifecycle.kill(source.sandbox_id)


async def test_a_fork_child_pauses_and_captures_as_deltas_of_its_own_base(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    parent_spec, _, filled = await _filled(node)
    [result] = await node.lifecycle.fork(parent_spec.sandbox_id, 1)
    child = result.sandbox
    # The fork's snapshot is gone; the child maps the image pinned in its own directory.
    assert node.lifecycle.snapshots.listed() == []
    child_dir = node.state_dir / "sandboxes" / child.sandbox_id
    assert (child_dir / "base.memory").is_file()
    token = child.envd_access_token
    await node.lifecycle.create_snapshot(child.sandbox_id)
    assert sum(_copied(caplog).values()) < QUIET, _copied(caplog)
    await node.lifecycle.pause(child.sandbox_id)
    assert (child_dir / "delta.state").is_file()
    resumed = await node.lifecycle.resume(child.sandbox_id)
    assert await sh(node.session, resumed.host, token, f"md5sum {BLOB}") == filled
    for sandbox_id in (child.sandbox_id, parent_spec.sandbox_id):
        await node.lifecycle.kill(sandbox_id)
    for meta in node.lifecycle.snapshots.listed():
        await node.lifecycle.delete_snapshot(meta.snapshot_id)
