"""Ending sandboxes: a kill, running or paused, leaves nothing; the timeout kills, or pauses the
sandboxes that asked for it."""

from __future__ import annotations

import asyncio
import time

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound, Unavailable
from aenv_common.limits import DEFAULT_TIMEOUT_S

from .conftest import FILESYSTEM, PAUSED, RUNNING, Wing


def assert_gone(wing: Wing, sandbox_id: str) -> None:
    assert not wing.service.registry.has(sandbox_id)
    assert not wing.service.registry.is_busy(sandbox_id)
    assert wing.service.registry.serving(sandbox_id) is None
    assert not wing.directory(sandbox_id).exists()
    assert sandbox_id not in wing.records.records
    with pytest.raises(NotFound):
        wing.service.registry.record(sandbox_id)


async def test_a_kill_of_a_running_sandbox_leaves_nothing(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.kills.kill(sandbox.sandbox_id)
    assert_gone(wing, sandbox.sandbox_id)
    assert wing.vm(sandbox).stopping
    assert wing.network.live == []
    assert wing.network.destroyed == [sandbox.slot]
    assert wing.allocations.published == 2  # its create's and its kill's


async def test_a_kill_of_a_paused_sandbox_leaves_nothing(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.settled()
    await wing.service.kills.kill(sandbox.sandbox_id)
    assert_gone(wing, sandbox.sandbox_id)
    assert wing.service.registry.paused_ids() == []
    assert wing.network.live == []


async def test_a_kill_right_after_a_pause_waits_for_its_vm_to_quit(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.service.kills.kill(sandbox.sandbox_id)  # the quit still runs in the background
    assert wing.vm(sandbox).stopping
    assert_gone(wing, sandbox.sandbox_id)
    await wing.network.settled()
    assert wing.network.live == []


async def test_a_kill_during_a_kill_finds_it_gone_not_busy(wing: Wing) -> None:
    sandbox = await wing.create()
    first, second = await asyncio.gather(
        wing.service.kills.kill(sandbox.sandbox_id), wing.service.kills.kill(sandbox.sandbox_id),
        return_exceptions=True)
    assert first is None and isinstance(second, NotFound), (first, second)
    assert_gone(wing, sandbox.sandbox_id)


async def test_a_kill_of_an_unknown_sandbox_is_not_found(wing: Wing) -> None:
    with pytest.raises(NotFound):
        await wing.service.kills.kill("nosuch")


async def test_the_others_live_on_after_a_kill(wing: Wing) -> None:
    doomed, kept = await wing.create(), await wing.create()
    await wing.service.kills.kill(doomed.sandbox_id)
    assert wing.service.registry.all() == [kept]
    assert wing.network.live == [kept.slot]
    assert wing.records.records[kept.sandbox_id].state == RUNNING
    assert not wing.vm(kept).stopping


# --- expiry --------------------------------------------------------------------------------------

def auto_pause() -> cluster_pb2.Lifecycle:
    return cluster_pb2.Lifecycle(auto_pause=True, auto_pause_mode=FILESYSTEM)


async def test_the_timeout_pauses_who_asked_for_it_and_kills_the_rest(wing: Wing) -> None:
    pausing = await wing.create(lifecycle=auto_pause())
    killed = await wing.create()
    lasting = await wing.create(timeout_seconds=DEFAULT_TIMEOUT_S * 10)

    expired = await wing.service.kills.expire_due(now=time.time() + DEFAULT_TIMEOUT_S + 1)

    assert sorted(expired) == sorted([pausing.sandbox_id, killed.sandbox_id])
    assert wing.service.registry.paused_ids() == [pausing.sandbox_id]
    paused = wing.records.records[pausing.sandbox_id]
    assert (paused.state, paused.pause_mode) == (PAUSED, FILESYSTEM)
    assert_gone(wing, killed.sandbox_id)
    assert wing.service.registry.all() == [lasting]
    await wing.settled()
    assert wing.network.live == [lasting.slot]


async def test_nothing_expires_before_its_end(wing: Wing) -> None:
    sandbox = await wing.create()
    assert await wing.service.kills.expire_due(now=time.time() + DEFAULT_TIMEOUT_S - 60) == []
    assert wing.service.registry.all() == [sandbox]


async def test_a_timeout_set_to_now_expires_it(wing: Wing) -> None:
    sandbox = await wing.create()
    # E2B: the action runs now.
    record = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)
    assert record.state == cluster_pb2.SANDBOX_STATE_KILLING
    assert_gone(wing, sandbox.sandbox_id)
    assert await wing.service.kills.expire_due() == []


async def test_a_failing_auto_pause_does_not_keep_the_others_from_expiring(wing: Wing) -> None:
    stuck = await wing.create(lifecycle=auto_pause())
    killed = await wing.create()
    wing.envd.fail_on["sync"] = Unavailable("the guest agent did not answer")  # stuck's pause

    await wing.service.kills.expire_due(now=time.time() + DEFAULT_TIMEOUT_S + 1)

    assert_gone(wing, killed.sandbox_id)
    assert wing.service.guest_metrics.is_running(stuck.sandbox_id)  # its pause failed: it runs on


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
async def test_a_kill_whose_record_delete_failed_can_be_retried(
    wing: Wing, paused: bool
) -> None:
    sandbox = await wing.create()
    if paused:
        await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    wing.records.delete_failures.append(Unavailable("etcd is unavailable"))
    with pytest.raises(Unavailable):
        await wing.service.kills.kill(sandbox.sandbox_id)

    await wing.service.kills.kill(sandbox.sandbox_id)
    assert_gone(wing, sandbox.sandbox_id)
