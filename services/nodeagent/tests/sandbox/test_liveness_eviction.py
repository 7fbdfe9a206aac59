"""The node's two deaths by judgement, over the fake wing: a guest whose envd stops answering is
ended with GUEST_HANG after the allowed misses, never while it is paused, held by an operation or
fresh (sandbox/liveness.py); under memory pressure the youngest sandbox is evicted, one at a time
until MemAvailable is back over the threshold (capacity/eviction.py)."""

from __future__ import annotations

import asyncio

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_nodeagent.capacity.eviction import Evictions
from aenv_nodeagent.sandbox.liveness import Liveness, LivenessSettings

from ..fakes.events import RecordingEvents
from .conftest import FILESYSTEM, Wing

HANG = c.DEATH_CAUSE_GUEST_HANG
EVICTED = c.DEATH_CAUSE_EVICTED_MEMORY_PRESSURE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Guests:
    """envd /health by host: answering unless listed in `silent`; counts the probes."""

    def __init__(self) -> None:
        self.silent: set[str] = set()
        self.probes: list[str] = []

    async def answers(self, host: str, timeout_s: float) -> bool:
        self.probes.append(host)
        await asyncio.sleep(0)
        return host not in self.silent


def _events(wing: Wing) -> RecordingEvents:
    assert isinstance(wing.service.context.events, RecordingEvents)
    return wing.service.context.events


def _liveness(wing: Wing, guests: Guests, clock: Clock, failures: int = 3) -> Liveness:
    return Liveness(wing.service.registry, guests.answers, wing.service.kills.kill,
                    LivenessSettings(interval_s=30, failures=failures, timeout_s=5), clock)


async def _passes(liveness: Liveness, clock: Clock, count: int) -> list[str]:
    ended: list[str] = []
    for _ in range(count):
        clock.now += 30
        ended += await liveness.probe_all()
    return ended


async def test_a_guest_that_stops_answering_is_ended_after_the_allowed_misses(
    wing: Wing,
) -> None:
    guests, clock = Guests(), Clock()
    liveness = _liveness(wing, guests, clock)
    hung, healthy = await wing.create(), await wing.create()
    await liveness.probe_all()  # first seen: not probed yet
    assert guests.probes == []
    guests.silent.add(hung.host)
    assert await _passes(liveness, clock, 2) == []  # two misses of three
    assert await _passes(liveness, clock, 1) == [hung.sandbox_id]
    assert not wing.service.registry.has(hung.sandbox_id)
    cert = _events(wing).deaths[hung.sandbox_id]
    assert (cert.cause, cert.detail) == (HANG, "envd did not answer /health for 90 s")
    assert wing.service.registry.is_running(healthy.sandbox_id)
    assert healthy.sandbox_id not in _events(wing).deaths


async def test_an_answer_resets_the_count(wing: Wing) -> None:
    guests, clock = Guests(), Clock()
    liveness = _liveness(wing, guests, clock)
    sandbox = await wing.create()
    await liveness.probe_all()
    for _ in range(3):
        guests.silent.add(sandbox.host)
        assert await _passes(liveness, clock, 2) == []
        guests.silent.clear()
        assert await _passes(liveness, clock, 1) == []
    assert wing.service.registry.is_running(sandbox.sandbox_id)


async def test_paused_busy_and_fresh_sandboxes_are_never_probed(wing: Wing) -> None:
    guests, clock = Guests(), Clock()
    liveness = _liveness(wing, guests, clock, failures=1)
    paused, busy = await wing.create(), await wing.create()
    await liveness.probe_all()
    guests.silent.update({paused.host, busy.host})
    await wing.service.pauses.pause(paused.sandbox_id, FILESYSTEM)
    with wing.service.registry.exclusive(busy.sandbox_id):
        assert await _passes(liveness, clock, 3) == []
    assert guests.probes == []
    resumed = await wing.service.pauses.resume(paused.sandbox_id)  # a new VM: fresh again
    guests.silent.add(resumed.host)
    assert await liveness.probe_all() == [busy.sandbox_id]  # busy no more, missed once
    assert guests.probes == [busy.host]
    assert await _passes(liveness, clock, 1) == [paused.sandbox_id]


async def test_a_probe_overtaken_by_an_operation_does_not_count(wing: Wing) -> None:
    clock = Clock()
    sandbox = await wing.create()

    async def answers(host: str, timeout_s: float) -> bool:
        held.__enter__()  # a pause takes the sandbox while the probe is out
        return False

    held = wing.service.registry.exclusive(sandbox.sandbox_id)
    liveness = Liveness(wing.service.registry, answers, wing.service.kills.kill,
                        LivenessSettings(30, 1, 5), clock)
    await liveness.probe_all()
    assert await _passes(liveness, clock, 1) == []
    held.__exit__(None, None, None)
    assert wing.service.registry.is_running(sandbox.sandbox_id)


async def test_switched_off_it_never_probes(wing: Wing) -> None:
    guests = Guests()
    await wing.create()
    off = Liveness(wing.service.registry, guests.answers, wing.service.kills.kill,
                   LivenessSettings(interval_s=0))
    await asyncio.wait_for(off.run(), 1)  # returns at once
    assert guests.probes == []


async def test_pressure_evicts_the_youngest_until_relieved(wing: Wing) -> None:
    oldest, middle, youngest = [await wing.create() for _ in range(3)]
    readings = iter([100, 100, 300])  # MiB available: under 200 twice, then relieved
    evictions = Evictions(wing.service.registry, wing.service.kills.kill, below_mib=200,
                          available_mib=lambda: next(readings), settle_s=0)
    assert await evictions.relieve() == [youngest.sandbox_id, middle.sandbox_id]
    assert wing.service.registry.is_running(oldest.sandbox_id)
    cert = _events(wing).deaths[youngest.sandbox_id]
    assert cert.cause == EVICTED and "MemAvailable was 100 MiB" in cert.detail


async def test_eviction_skips_busy_sandboxes_and_stops_when_none_is_left(wing: Wing) -> None:
    older, younger = await wing.create(), await wing.create()
    evictions = Evictions(wing.service.registry, wing.service.kills.kill, below_mib=200,
                          available_mib=lambda: 100, settle_s=0)
    with wing.service.registry.exclusive(younger.sandbox_id):
        assert await evictions.relieve() == [older.sandbox_id]
    assert wing.service.registry.is_running(younger.sandbox_id)


async def test_eviction_is_off_at_zero(wing: Wing) -> None:
    sandbox = await wing.create()
    off = Evictions(wing.service.registry, wing.service.kills.kill, below_mib=0,
                    available_mib=lambda: 0, settle_s=0)
    await asyncio.wait_for(off.run(0.01), 1)
    assert wing.service.registry.is_running(sandbox.sandbox_id)
