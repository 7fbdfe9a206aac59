"""A sandbox's owner key (the API key whose secrets fill its network rules) is in its record
from its create on, and stays through pause/resume, reset, snapshot and fork: a fork child is
its parent's owner's, a create from a snapshot its own creator's."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.sandbox import fork

from .conftest import FILESYSTEM, Wing

OWNER = "key-owner"


async def test_the_owner_key_survives_every_lifecycle_step(wing: Wing) -> None:
    sandbox = await wing.create(owner_key_id=OWNER)
    assert sandbox.record.owner_key_id == OWNER
    assert wing.records.records[sandbox.sandbox_id].owner_key_id == OWNER

    paused = await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    assert paused.owner_key_id == OWNER
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id)
    assert resumed.record.owner_key_id == OWNER

    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    reset = await wing.service.forks.reset(sandbox.sandbox_id, meta.snapshot_id)
    assert reset.owner_key_id == OWNER

    other = await wing.create(template_id=meta.snapshot_id, owner_key_id="key-other")
    assert other.record.owner_key_id == "key-other"


def test_a_fork_child_is_its_parents_owners() -> None:
    # A FakeVm makes no memory image for children, so the child's spec is checked directly.
    parent = cluster_pb2.SandboxRecord(sandbox_id="parent", owner_key_id=OWNER)
    assert fork._child_spec(parent, "child", "token", 60).owner_key_id == OWNER
