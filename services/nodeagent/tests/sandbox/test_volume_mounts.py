"""A sandbox's volume mounts through its lifecycle on the node: the create's spec puts them in
its record (tickets included) and envd's /init, its slot gets a relay before its guest runs and
loses it with the slot; pause keeps them in the record, resume brings the relay back; a snapshot's
record has them without tickets; fork children mount their own or their parent's; a node without
snapstore, or a restore that fails, leaves nothing."""

from __future__ import annotations

from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import SNAPSHOTS
from aenv_common.errors import AenvError, Conflict, Internal, InvalidArgument
from aenv_nodeagent.sandbox import fork
from aenv_nodeagent.volumes import VolumeEndpoint, VolumeRelays

from ..fakes.volumes import loopback_listener
from .conftest import FILESYSTEM, PAUSED, Wing

VOL = "vol-aaaaaaaaaaaaaaaaaaaa"
TICKET = "eyJzIjoieCJ9.sig-parent"


def mounts(ticket: str = TICKET, volume_id: str = VOL) -> list[cluster_pb2.VolumeMount]:
    return [cluster_pb2.VolumeMount(path="/data", volume_id=volume_id, name="data",
                                    ticket=ticket, seen_as=VOL),
            cluster_pb2.VolumeMount(path="/ro", volume_id="vol-bbbbbbbbbbbbbbbbbbbb",
                                    name="shared", ticket=ticket + "2", read_only=True)]


def preamble_of(wing: Wing, netns: str) -> bytes:
    return wing.relays.running()[netns].preamble


async def test_a_create_carries_its_mounts_to_record_relay_and_envd(wing: Wing) -> None:
    sandbox = await wing.create(volume_mounts=mounts())
    assert list(sandbox.record.volume_mounts) == mounts()
    assert list(wing.records.records[sandbox.sandbox_id].volume_mounts) == mounts()
    assert preamble_of(wing, sandbox.slot.netns) == (
        f"AENV-VOLUMES 1 {TICKET} {TICKET}2\n".encode())
    assert wing.envd.volume_mounts[sandbox.host] == [
        {"path": "/data", "server": "169.254.0.22", "port": 2049, "export": f"/{VOL}",
         "readOnly": False},
        {"path": "/ro", "server": "169.254.0.22", "port": 2049,
         "export": "/vol-bbbbbbbbbbbbbbbbbbbb", "readOnly": True}]

    await wing.service.kills.kill(sandbox.sandbox_id)
    assert wing.relays.running() == {}


async def test_a_sandbox_without_mounts_has_no_relay(wing: Wing) -> None:
    sandbox = await wing.create()
    assert wing.relays.running() == {}
    assert wing.envd.volume_mounts[sandbox.host] == []


async def test_pause_keeps_the_mounts_and_resume_brings_the_relay_back(wing: Wing) -> None:
    sandbox = await wing.create(volume_mounts=mounts())
    paused = await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    assert paused.state == PAUSED
    assert list(paused.volume_mounts) == mounts()
    await wing.settled()  # its VM quit and its slot went, with the relay
    assert wing.relays.running() == {}
    assert list(wing.records.records[sandbox.sandbox_id].volume_mounts) == mounts()

    resumed = await wing.service.pauses.resume(sandbox.sandbox_id)
    assert list(resumed.record.volume_mounts) == mounts()
    assert list(wing.relays.running()) == [resumed.slot.netns]
    assert preamble_of(wing, resumed.slot.netns).startswith(b"AENV-VOLUMES 1 " + TICKET.encode())
    # The guest is asked to mount again: envd skips what its memory has mounted already.
    assert wing.envd.volume_mounts[resumed.host][0]["path"] == "/data"


async def test_a_paused_sandbox_taken_back_after_a_restart_keeps_its_mounts(wing: Wing) -> None:
    sandbox = await wing.create(volume_mounts=mounts())
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    successor = await wing.restart()
    successor.service.takeback.load()
    resumed = await successor.service.pauses.resume(sandbox.sandbox_id)
    assert list(resumed.record.volume_mounts) == mounts()
    assert list(successor.relays.running()) == [resumed.slot.netns]


async def test_a_snapshot_records_the_mounts_without_tickets(wing: Wing) -> None:
    sandbox = await wing.create(volume_mounts=mounts())
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    record = await wing.records.get_record(SNAPSHOTS, meta.snapshot_id,
                                           cluster_pb2.SnapshotRecord)
    assert record is not None
    assert [m.ticket for m in record.volume_mounts] == ["", ""]
    assert [(m.path, m.volume_id, m.seen_as, m.read_only) for m in record.volume_mounts] == [
        ("/data", VOL, VOL, False), ("/ro", "vol-bbbbbbbbbbbbbbbbbbbb", "", True)]
    assert TICKET not in (meta.directory / "snapshot.json").read_text()

    # A create from it gets its mounts (and tickets of its own) in its spec, from the gateway.
    other = await wing.create(template_id=meta.snapshot_id,
                              volume_mounts=mounts(ticket="tk.other"))
    assert preamble_of(wing, other.slot.netns) == b"AENV-VOLUMES 1 tk.other tk.other2\n"
    assert preamble_of(wing, sandbox.slot.netns).startswith(b"AENV-VOLUMES 1 " + TICKET.encode())


async def test_a_reset_keeps_the_relay_of_its_slot(wing: Wing) -> None:
    sandbox = await wing.create(volume_mounts=mounts())
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    relay = wing.relays.running()[sandbox.slot.netns]
    await wing.service.forks.reset(sandbox.sandbox_id, meta.snapshot_id)
    assert wing.relays.running() == {sandbox.slot.netns: relay}


async def test_a_failed_restore_leaves_no_relay(wing: Wing) -> None:
    wing.envd.fail_on["init"] = Internal("envd /init failed: HTTP 500 mount refused")
    with pytest.raises(Internal):
        await wing.create(volume_mounts=mounts())
    assert wing.relays.running() == {}
    assert wing.network.live == []


async def test_without_snapstore_a_create_with_mounts_fails_before_anything(
    wing: Wing,
) -> None:
    wing.service.creates._restorer._relays = VolumeRelays(  # a node with no snapstore_address
        VolumeEndpoint(""), open_listener=loopback_listener)
    with pytest.raises(Conflict, match="volumes need a snapstore"):
        await wing.create(volume_mounts=mounts())
    assert wing.network.created == []
    assert wing.records.records == {}
    await wing.create()  # one without mounts still works


async def test_a_bad_mount_is_refused(wing: Wing) -> None:
    bad = mounts(ticket="has space")
    with pytest.raises(InvalidArgument) as caught:
        await wing.create(volume_mounts=bad)
    assert "has space" not in caught.value.message
    assert wing.network.created == []


def test_fork_children_mount_their_own_or_their_parents() -> None:
    parent = cluster_pb2.SandboxRecord(sandbox_id="parent", volume_mounts=mounts())
    shared = fork._child_mounts(2, parent, [])
    assert [list(m) for m in shared] == [mounts(), mounts()]
    own = [mounts("tk.child0", "vol-clone0aaaaaaaaaaaaaaa"),
           mounts("tk.child1", "vol-clone1aaaaaaaaaaaaaaa")]
    given = fork._child_mounts(2, parent, own)
    specs = [fork._child_spec(parent, f"child{i}", "token", 60, m) for i, m in enumerate(given)]
    assert [list(spec.volume_mounts) for spec in specs] == own
    assert [s.volume_mounts[0].seen_as for s in specs] == [VOL, VOL]


def test_fork_child_mounts_must_match_the_parents() -> None:
    parent = cluster_pb2.SandboxRecord(sandbox_id="parent", volume_mounts=mounts())
    with pytest.raises(InvalidArgument, match="one entry per child"):
        fork._child_mounts(2, parent, [mounts()])
    elsewhere = mounts()
    elsewhere[0].path = "/elsewhere"
    with pytest.raises(InvalidArgument, match="parent's mount paths"):
        fork._child_mounts(1, parent, [elsewhere])


async def test_fork_children_that_fail_leave_no_relay(wing: Wing) -> None:
    # A FakeVm's capture is no QEMU stream: each child fails after its relay started.
    parent = await wing.create(volume_mounts=mounts())
    own = [mounts(f"tk.child{i}") for i in range(2)]
    results = await wing.service.forks.fork(parent.sandbox_id, 2, child_mounts=own)
    assert len(results) == 2 and all(isinstance(r, AenvError) for r in results)
    assert list(wing.relays.running()) == [parent.slot.netns]


async def test_a_fork_refuses_child_mounts_not_one_per_child(wing: Wing) -> None:
    parent = await wing.create(volume_mounts=mounts())
    with pytest.raises(InvalidArgument):
        await wing.service.forks.fork(parent.sandbox_id, 2, child_mounts=[mounts()])
    assert wing.service.snapshots.store.listed() == []
    assert cast(object, wing.service.registry.get(parent.sandbox_id)) is parent
