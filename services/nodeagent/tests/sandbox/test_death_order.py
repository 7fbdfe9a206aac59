"""A death's steps in order: its DIED event and certificate are written before the sandbox's
traffic is cut, so a client the cut wakes (the SDK probing after its stream ended) finds why it
ended; a removal that fails after them leaves the sandbox for a retry that does not announce the
death twice. The statvfs check behind a SIGBUS read as a full disk."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import Conflict, Unavailable
from aenv_nodeagent.sandbox.watch import filesystem_full
from aenv_nodeagent.sandbox.wing import SandboxWing

from ..fakes.events import RecordingEvents
from .conftest import FILESYSTEM, Wing

DIED = c.SANDBOX_EVENT_TYPE_DIED
CRASH = c.DEATH_CAUSE_VMM_CRASH


class CutRecorder:
    """The data plane's cut: what the events said when each sandbox's traffic was cut."""

    def __init__(self, events: RecordingEvents) -> None:
        self.events = events
        self.seen: dict[str, tuple[bool, list[int]]] = {}
        self.why: dict[str, str] = {}

    async def __call__(self, sandbox_id: str, why: str = "", /) -> None:
        self.seen[sandbox_id] = (sandbox_id in self.events.deaths,
                                 list(self.events.types(sandbox_id)))
        self.why[sandbox_id] = why


def _cutting(wing: Wing) -> tuple[SandboxWing, CutRecorder, RecordingEvents]:
    events = wing.service.context.events
    assert isinstance(events, RecordingEvents)
    cut = CutRecorder(events)
    context = dataclasses.replace(wing.service.context, cut_traffic=cut)
    return SandboxWing(context, wing.driver, relays=wing.relays), cut, events


async def test_a_death_is_certified_before_its_traffic_is_cut(wing: Wing) -> None:
    service, cut, _ = _cutting(wing)
    dying, owned = await wing.create(), await wing.create()
    await service.kills.kill(dying.sandbox_id, cause=CRASH, detail="qemu killed by signal 9")
    await service.kills.kill(owned.sandbox_id)
    certified, types = cut.seen[dying.sandbox_id]
    assert certified and types[-1] == DIED
    assert cut.why[dying.sandbox_id] == (
        f"sandbox {dying.sandbox_id} died: vmm_crash (qemu killed by signal 9)")
    # An owner's kill has no certificate, and its streams end with E2B's words alone.
    assert cut.seen[owned.sandbox_id][0] is False
    assert cut.why[owned.sandbox_id] == ""
    assert not service.registry.has(dying.sandbox_id)


async def test_a_removal_that_fails_after_the_certificate_is_retried_without_a_second_death(
    wing: Wing,
) -> None:
    service, cut, events = _cutting(wing)
    sandbox = await wing.create()
    wing.records.delete_failures.append(Unavailable("etcd unavailable"))
    try:
        await service.kills.kill(sandbox.sandbox_id, cause=CRASH, detail="qemu died")
    except Unavailable:
        pass
    else:
        raise AssertionError("the removal's failure was not raised")
    # Certified, still held and published: nothing of it is gone, its traffic not cut.
    assert sandbox.sandbox_id in events.deaths
    assert service.registry.has(sandbox.sandbox_id)
    assert sandbox.sandbox_id in wing.records.records
    assert sandbox.sandbox_id not in cut.seen
    await service.kills.kill(sandbox.sandbox_id, cause=CRASH, detail="qemu died")
    assert events.types(sandbox.sandbox_id).count(DIED) == 1
    assert not service.registry.has(sandbox.sandbox_id)
    assert sandbox.sandbox_id not in wing.records.records
    assert cut.seen[sandbox.sandbox_id][0] is True


def test_a_filesystem_is_full_below_the_room_asked_for(tmp_path: Path) -> None:
    assert filesystem_full(tmp_path, room_bytes=1 << 62) is True
    assert filesystem_full(tmp_path, room_bytes=0) is False
    assert filesystem_full(tmp_path / "gone") is False  # unreadable: not assumed full


async def test_a_busy_paused_sandbox_s_death_is_refused_before_it_is_certified(
    wing: Wing,
) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.settled()
    events = wing.service.context.events
    assert isinstance(events, RecordingEvents)
    with wing.service.registry.exclusive(sandbox.sandbox_id), pytest.raises(Conflict):
        await wing.service.kills.kill(sandbox.sandbox_id, cause=CRASH, detail="lease lapsed")
    assert sandbox.sandbox_id not in events.deaths
    assert wing.service.registry.paused(sandbox.sandbox_id) is not None
    await wing.service.kills.kill(sandbox.sandbox_id, cause=CRASH, detail="lease lapsed")
    assert sandbox.sandbox_id in events.deaths
    assert wing.service.registry.paused(sandbox.sandbox_id) is None
