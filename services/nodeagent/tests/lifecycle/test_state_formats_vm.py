"""A node agent's restart over state files in their versioned formats, with real VMs: an
upgraded agent takes back what an older one left (files with no format), and an agent refuses
at start, by name, a file of a newer format than it reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.state_files import NewerStateFormat
from aenv_nodeagent.sandbox.model import PAUSED_MARKER
from aenv_nodeagent.snapshots.meta import SNAPSHOT_META

from .conftest import Node, qemus_under, spec
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

# What a node's state dir holds (its templates are kept apart, in the tests' shared cache).
STATE_FILES = (PAUSED_MARKER, SNAPSHOT_META)


def _formats(state_dir: Path) -> dict[str, int]:
    return {str(path.relative_to(state_dir)): json.loads(path.read_text())["format"]
            for name in STATE_FILES for path in state_dir.rglob(name)}


def _as_an_older_agent_wrote(state_dir: Path) -> int:
    """Drop the format of every state file, as agents wrote them before; how many."""
    count = 0
    for name in STATE_FILES:
        for path in state_dir.rglob(name):
            document = json.loads(path.read_text())
            del document["format"]
            path.write_text(json.dumps(document))
            count += 1
    return count


async def test_an_upgraded_agent_takes_back_what_an_older_one_left(node: Node) -> None:
    paused_spec, running_spec = spec(), spec()
    paused = await node.sandboxes.creates.create(paused_spec)
    await sh(node.session, paused.host, paused_spec.envd_access_token, "echo paused > /root/f")
    await node.sandboxes.pauses.pause(paused_spec.sandbox_id)
    running = await node.sandboxes.creates.create(running_spec)
    await sh(node.session, running.host, running_spec.envd_access_token, "echo kept > /root/f")
    snapshot = await node.sandboxes.snapshots.create(running_spec.sandbox_id, "s1")
    await node.settled()
    written = _formats(node.state_dir)
    assert set(written.values()) == {1}
    assert {Path(p).name for p in written} == set(STATE_FILES)  # every kind is on disk
    assert _as_an_older_agent_wrote(node.state_dir) == len(written)

    restarted = await node.restart()
    adopted = restarted.sandboxes.registry.get(running_spec.sandbox_id)
    assert adopted.vm.pid == running.vm.pid
    assert await sh(node.session, adopted.host, running_spec.envd_access_token,
                    "cat /root/f") == "kept\n"
    assert restarted.sandboxes.registry.paused_ids() == [paused_spec.sandbox_id]
    assert [m.snapshot_id for m in restarted.sandboxes.snapshots.store.listed()] == [
        snapshot.snapshot_id]
    resumed = await restarted.sandboxes.pauses.resume(paused_spec.sandbox_id, timeout_s=60)
    assert await sh(node.session, resumed.host, paused_spec.envd_access_token,
                    "cat /root/f") == "paused\n"
    await restarted.sandboxes.pauses.pause(paused_spec.sandbox_id)  # written anew: format 1
    assert json.loads((resumed.directory / PAUSED_MARKER).read_text())["format"] == 1


async def test_an_agent_refuses_at_start_a_state_file_of_a_newer_format(node: Node) -> None:
    s = spec()
    sandbox = await node.sandboxes.creates.create(s)
    await node.sandboxes.pauses.pause(s.sandbox_id)
    await node.settled()
    assert qemus_under(node.state_dir) == []
    marker = sandbox.directory / PAUSED_MARKER
    document = json.loads(marker.read_text())
    marker.write_text(json.dumps(document | {"format": 2, "top_node": "ovl2"}))
    with pytest.raises(NewerStateFormat, match=re.escape(
            f"{marker} is format 2; this node agent reads formats up to 1: "
            "upgrade the node agent")):
        await node.restart()
    assert marker.is_file()  # refused, not dropped as unreadable

    marker.write_text(json.dumps(document))  # the agent that wrote it, back again
    restarted = await node.restart()
    assert restarted.sandboxes.registry.paused_ids() == [s.sandbox_id]
    assert restarted.sandboxes.registry.record(s.sandbox_id).state == (
        cluster_pb2.SANDBOX_STATE_PAUSED)
