"""Every VM restored from one image (fork children, resets, creates from a snapshot) must read
its own random bytes, through /dev/urandom, getrandom() and Python's uuid4, right away.

A restore clones the guest kernel's ChaCha CRNG together with its reseed schedule (jiffies go on
from the capture). Entropy written at `/init` only reaches the input pool; without an explicit
reseed the clones read one shared key chain until the cloned schedule's next reseed: up to half
the uptime during the first two minutes, 60 s afterwards. Each capture below follows a reseed of
the source (a guest does one whenever its schedule says so): the clones then inherit a whole
interval, and a missing reseed at `/init` cannot hide behind a capture that happened to land
just before the schedule's next one (as a fork of a sandbox fresh from its template often does).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from aenv_nodeagent.sandbox.model import Sandbox

from .conftest import Node, spec
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]

CHILDREN = 4
# The reproduction, then one Python per guest for several reads of each interface: a
# clone whose CRNG lags a few steps behind another's still repeats one of its values.
SAMPLE = (
    "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; "
    "python3 -c 'import os, uuid; f = open(\"/dev/urandom\", \"rb\", 0); "
    "print(*(f.read(16).hex() for _ in range(4)), *(os.getrandom(16).hex() for _ in range(4)), "
    "*(uuid.uuid4().hex for _ in range(4)))'"
)
# RNDRESEEDCRNG: what the guest's own schedule does now and then.
RESEED = "python3 -c 'import fcntl; fcntl.ioctl(open(\"/dev/urandom\", \"rb\"), 0x5207)'"


class Draws:
    """Random values read from guests, by who read them; a value read twice is a collision."""

    def __init__(self) -> None:
        self.readers: defaultdict[str, list[str]] = defaultdict(list)

    async def read(self, node: Node, host: str, token: str, label: str) -> None:
        values = (await sh(node.session, host, token, SAMPLE)).split()
        assert len(values) == 13 and all(len(v) == 32 for v in values), values
        for value in values:
            self.readers[value].append(label)

    def collisions(self) -> dict[str, list[str]]:
        return {value: who for value, who in self.readers.items() if len(who) > 1}


async def test_fork_children_read_their_own_random_bytes(node: Node) -> None:
    ops = node.sandboxes
    parent_spec = spec()
    parent = await ops.creates.create(parent_spec)
    ptoken = parent_spec.envd_access_token
    collided: dict[int, dict[str, list[str]]] = {}
    for cycle in range(4):  # forks after 0, 1, 2 and 3 pause/resume cycles
        if cycle:
            await ops.pauses.pause(parent_spec.sandbox_id)
            parent = await ops.pauses.resume(parent_spec.sandbox_id)
        await sh(node.session, parent.host, ptoken, RESEED)
        results = await ops.forks.fork(parent_spec.sandbox_id, CHILDREN)
        forked = [r for r in results if isinstance(r, Sandbox)]
        assert len(forked) == len(results), results
        children = [ops.registry.get(r.sandbox_id) for r in forked]
        draws = Draws()
        for moment in ("at fork", "2 s later"):
            await asyncio.gather(
                draws.read(node, parent.host, ptoken, f"parent {moment}"),
                *(draws.read(node, child.host, child.record.envd_access_token,
                             f"child {k} {moment}") for k, child in enumerate(children)))
            if moment == "at fork":
                await asyncio.sleep(2)
        if collisions := draws.collisions():
            collided[cycle] = collisions
        for child in children:
            await ops.kills.kill(child.record.sandbox_id)
    await ops.kills.kill(parent_spec.sandbox_id)
    summary = {cycle: sorted({reader for who in found.values() for reader in who})
               for cycle, found in collided.items()}
    assert collided == {}, f"values read twice, by pause/resume cycles before the fork: {summary}"


async def test_restores_of_one_snapshot_read_their_own_random_bytes(node: Node) -> None:
    ops = node.sandboxes
    source_spec = spec()
    source = await ops.creates.create(source_spec)
    token = source_spec.envd_access_token
    await sh(node.session, source.host, token, RESEED)
    snapshot = await ops.snapshots.create(source_spec.sandbox_id)
    draws = Draws()
    # Two sandboxes created from the snapshot, read at once...
    copies = [spec(template_id=snapshot.snapshot_id) for _ in range(2)]
    created = await asyncio.gather(*(ops.creates.create(s) for s in copies))
    await asyncio.gather(*(draws.read(node, sbx.host, s.envd_access_token, f"create {k}")
                           for k, (sbx, s) in enumerate(zip(created, copies, strict=True))))
    for s in copies:
        await ops.kills.kill(s.sandbox_id)
    # ...and the source reset to it twice, in place.
    for k in range(2):
        await ops.forks.reset(source_spec.sandbox_id, snapshot.snapshot_id)
        await draws.read(node, source.host, token, f"reset {k}")
    assert draws.collisions() == {}
    await ops.kills.kill(source_spec.sandbox_id)
