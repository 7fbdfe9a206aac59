"""A fork's first children with real QEMU: restored while the capture's image is still being
made, they map the capture's reference (the parent's base, or its last capture's image) and load
the pages written since (memory/fork_delta.py), and live a full life on it; when the parent wrote
too much for that, they wait for the image."""

from __future__ import annotations

import asyncio
import os

import pytest

from aenv_nodeagent.memory.images import BASE_MEMORY
from aenv_nodeagent.sandbox.model import Sandbox

from .conftest import Node, spec
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

PAST = "cat /root/disk /run/mem"


async def _parent(node: Node, script: str = "") -> tuple[Sandbox, str]:
    parent_spec = spec()
    parent = await node.sandboxes.creates.create(parent_spec)
    token = parent_spec.envd_access_token
    # On its disk, and only in its memory (tmpfs): a child must have both.
    await sh(node.session, parent.host, token,
             f"echo disk > /root/disk && sync && echo mem > /run/mem {script}")
    return parent, token


async def test_a_child_loads_the_delta_onto_its_parents_base_and_lives_a_full_life(
    node: Node,
) -> None:
    lc = node.sandboxes
    parent, ptoken = await _parent(node)
    assert node.templates is not None
    template = await node.templates.get(parent.record.template_id)

    (child,) = await lc.forks.fork(parent.record.sandbox_id, 1)

    assert isinstance(child, Sandbox)
    assert "memory_image" not in child.timings_ms  # it did not wait for the capture's image
    assert os.path.samefile(child.directory / BASE_MEMORY, template.memory)
    cid, token = child.record.sandbox_id, child.record.envd_access_token
    assert await sh(node.session, child.host, token, PAST) == "disk\nmem\n"
    await sh(node.session, child.host, token, "echo own > /run/own")
    assert await sh(node.session, parent.host, ptoken, "cat /run/own 2>/dev/null; true") == ""

    # Its captures hold the delta it loaded and what it wrote since: a snapshot, a fork, a pause.
    snapshot = await lc.snapshots.create(cid, "of-a-delta-child")
    restored_spec = spec(template_id=snapshot.snapshot_id)
    restored = await lc.creates.create(restored_spec)
    assert await sh(node.session, restored.host, restored_spec.envd_access_token,
                    f"{PAST} /run/own") == "disk\nmem\nown\n"
    (grandchild,) = await lc.forks.fork(cid, 1)
    assert isinstance(grandchild, Sandbox)
    assert await sh(node.session, grandchild.host, grandchild.record.envd_access_token,
                    f"{PAST} /run/own") == "disk\nmem\nown\n"
    await lc.pauses.pause(cid)
    resumed = await lc.pauses.resume(cid)
    assert await sh(node.session, resumed.host, token, f"{PAST} /run/own") == "disk\nmem\nown\n"


    # The parent's next fork: a delta onto the image of its last capture, not onto its base.
    await sh(node.session, parent.host, ptoken, "echo again > /run/again")
    (second,) = await lc.forks.fork(parent.record.sandbox_id, 1)
    assert isinstance(second, Sandbox)
    assert "memory_image" not in second.timings_ms
    assert not os.path.samefile(second.directory / BASE_MEMORY, template.memory)
    stoken = second.record.envd_access_token
    assert await sh(node.session, second.host, stoken, f"{PAST} /run/again") == (
        "disk\nmem\nagain\n")
    await sh(node.session, second.host, stoken, "echo its-own > /run/own")
    of_second = await lc.snapshots.create(second.record.sandbox_id, "of-a-second-child")
    again_spec = spec(template_id=of_second.snapshot_id)
    again = await lc.creates.create(again_spec)
    assert await sh(node.session, again.host, again_spec.envd_access_token,
                    f"{PAST} /run/again /run/own") == "disk\nmem\nagain\nits-own\n"

    await asyncio.gather(*(lc.kills.kill(s.record.sandbox_id)
                           for s in (child, grandchild, restored, second, again, parent)))
    for taken in (snapshot, of_second):
        await lc.snapshots.delete(taken.snapshot_id)


async def test_children_of_a_parent_that_wrote_much_wait_for_the_image(node: Node) -> None:
    lc = node.sandboxes
    # 64 MiB in memory: more than a quarter of the template's data.
    parent, ptoken = await _parent(node, "&& head -c 64M /dev/urandom > /run/big")
    assert node.templates is not None
    template = await node.templates.get(parent.record.template_id)
    digest = "md5sum < /run/big"
    expected = await sh(node.session, parent.host, ptoken, digest)

    outcomes = await lc.forks.fork(parent.record.sandbox_id, 2)

    children = [child for child in outcomes if isinstance(child, Sandbox)]
    assert len(children) == 2, outcomes
    for child in children:
        assert "memory_image" in child.timings_ms
        assert not os.path.samefile(child.directory / BASE_MEMORY, template.memory)
        token = child.record.envd_access_token
        assert await sh(node.session, child.host, token, PAST) == "disk\nmem\n"
        assert await sh(node.session, child.host, token, digest) == expected
    await asyncio.gather(*(lc.kills.kill(s.record.sandbox_id) for s in (*children, parent)))
