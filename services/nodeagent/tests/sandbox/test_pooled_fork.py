"""A fork's children take pre-started VMs of the parent's template from the warm pool: each is
re-pointed at the fork's capture (the capture's memory image over its RAM, its overlay renamed
onto the capture's top layer, which is put under it) instead of waiting for a QEMU to start; one
that cannot be re-pointed is ended and a VM launched in its place; forks grow the pool."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from aenv_nodeagent.memory.images import BASE_MEMORY, BASE_STATE
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.pool import WarmPool, warm
from aenv_nodeagent.sandbox.model import DISK, RestoreImage, Sandbox, boot_image
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.templates.model import ROOT_DISK_ID
from aenv_nodeagent.vmm.errors import RemapFailed
from aenv_nodeagent.vmm.jailed_files import backing_chain

from ..fakes.network import FakeNetwork
from ..fakes.records import RecordingRecords
from ..fakes.templates import FakeTemplates
from ..fakes.vm import STATE_MARKER, FakeVm
from .conftest import TEMPLATE, Wing, build_wing

PRESTARTED = 2  # the pool's base share of the template


def captured_images(wing: Wing) -> None:
    """A FakeVm's capture is no QEMU stream, so no memory image can be made of it: a snapshot's
    image is stood in for by files a FakeVm restores from, pinned in the sandbox's directory
    as the real one is."""
    sources = wing.service.context.sources

    async def image(snapshot: SnapshotMeta, directory: Path) -> RestoreImage:
        if not snapshot.has_memory:
            return boot_image(wing.templates.inputs(snapshot.template_id))
        memory, state = directory / BASE_MEMORY, directory / BASE_STATE
        memory.write_bytes(b"\0" * 4096)
        state.write_bytes(STATE_MARKER)
        return RestoreImage(wing.templates.inputs(snapshot.template_id), memory, state,
                            snapshot.guest_token)

    sources.snapshot_image = image  # type: ignore[method-assign]


@pytest.fixture
async def pooled(
    tmp_path: Path, templates: FakeTemplates, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Wing, WarmPool]]:
    monkeypatch.setattr(warm, "SETTLE_S", 0.01)
    network = FakeNetwork()
    state = tmp_path / "state"
    pool = WarmPool(cast(NetworkManager, network), state / "pool", slots=0,
                    overlays_per_backing=0, vms_per_template=PRESTARTED,
                    snapshot_vms_per_template=4, vm_root=state / "sandboxes")
    wing = build_wing(state, RecordingRecords(), templates, await templates.get(TEMPLATE), pool,
                      network=network)
    captured_images(wing)
    pool.start()
    yield wing, pool
    await wing.service.destroy_all()
    await pool.close()
    await wing.relays.close()


async def refilled(pool: WarmPool, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not pool.full():
        assert time.monotonic() < deadline, f"the pool holds {pool.sizes()}"
        await asyncio.sleep(0.005)


async def fork(wing: Wing, parent: Sandbox, count: int) -> list[Sandbox]:
    outcomes = await wing.service.forks.fork(parent.sandbox_id, count)
    assert all(isinstance(child, Sandbox) for child in outcomes), outcomes
    return cast(list[Sandbox], outcomes)


async def test_children_take_pre_started_vms_re_pointed_at_the_capture(
    pooled: tuple[Wing, WarmPool],
) -> None:
    wing, pool = pooled
    parent = await wing.create()  # the template's VMs are pre-started from now on
    await refilled(pool)
    waiting = [vm for vm in wing.driver.launched if vm is not wing.vm(parent)]
    assert len(waiting) == PRESTARTED

    children = await fork(wing, parent, 3)

    taken = [child for child in children if wing.vm(child) in waiting]
    assert len(taken) == PRESTARTED
    for child in taken:
        vm = wing.vm(child)
        assert "repoint" in child.timings_ms and "launch" not in child.timings_ms
        assert vm.methods_called.index("repoint") < vm.methods_called.index("restore")
        # Its RAM maps the capture's image, pinned in its own directory.
        assert vm.memory.parent == child.directory and vm.memory.is_file()
        # Its overlay (the pool's, renamed) stands on the capture's top layer, as QEMU's chain.
        chain = backing_chain(child.directory / DISK)
        assert vm.chains[ROOT_DISK_ID].backing_files == chain
        assert chain[0].stem in wing.layer_files() and chain[1] == wing.template.disk
    # The third found one the pool started meanwhile, or launched its own.
    (third,) = [child for child in children if child not in taken]
    assert ("launch" in third.timings_ms) != ("repoint" in third.timings_ms)
    assert pool.takes["prestarted"] + pool.takes["missed"] == 1 + 3  # the parent found none
    # Forks of 3 were asked for: the pool keeps 3 now.
    await refilled(pool)
    assert pool.sizes()["vms"] == 3


async def test_a_vm_that_cannot_be_re_pointed_is_ended_and_one_launched_instead(
    pooled: tuple[Wing, WarmPool],
) -> None:
    wing, pool = pooled
    wing.driver.vm_fail_on["repoint"] = RemapFailed("QEMU could not map the memory image")
    parent = await wing.create()
    await refilled(pool)
    waiting = [vm for vm in wing.driver.launched if vm is not wing.vm(parent)]

    (child,) = await fork(wing, parent, 1)

    taken = [vm for vm in waiting if "repoint" in vm.methods_called]
    assert len(taken) == 1 and taken[0].stopping and "restore" not in taken[0].methods_called
    vm = wing.vm(child)
    assert vm not in waiting and "launch" in child.timings_ms
    # A fresh overlay over the capture's top layer, opened by the launched VM as it is.
    chain = backing_chain(child.directory / DISK)
    assert chain[0].stem in wing.layer_files() and vm.chains[ROOT_DISK_ID].backing_files == chain
    assert not [path for path in (wing.state_dir / "sandboxes").iterdir()
                if path.name not in (parent.sandbox_id, child.sandbox_id)
                and not path.name.startswith(".pool-")]


async def test_a_filesystem_only_snapshot_boots_without_the_pool(
    pooled: tuple[Wing, WarmPool],
) -> None:
    wing, pool = pooled
    parent = await wing.create()
    await refilled(pool)
    meta = await wing.service.snapshots.create(parent.sandbox_id, filesystem_only=True)
    child = await wing.service.creates.from_snapshot(meta, wing.spec())
    assert isinstance(wing.vm(child), FakeVm) and "boot" in child.timings_ms
    assert pool.takes["prestarted"] == 0
