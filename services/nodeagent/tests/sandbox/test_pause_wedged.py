"""A pause of a guest whose agent does not answer, as E2B's: refused when the caller requires a
healthy guest (the sandbox runs on, untouched), else taken and marked envd_unresponsive_at_pause,
after which only a cold boot resumes it (its memory would bring the wedged agent back)."""

from __future__ import annotations

import pytest

from aenv_common.errors import Conflict, Unavailable
from aenv_nodeagent.sandbox.model import PAUSED_MARKER, Paused

from .conftest import PAUSED, RUNNING, Wing


async def test_a_healthy_guest_pauses_unmarked(wing: Wing) -> None:
    sandbox = await wing.create()
    record = await wing.service.pauses.pause(sandbox.sandbox_id, require_healthy_guest=True)
    assert record.state == PAUSED and not record.envd_unresponsive_at_pause
    assert "answers" in wing.envd.methods_called()


async def test_a_wedged_guest_is_refused_when_a_healthy_one_is_required(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.envd.answering = False
    with pytest.raises(Unavailable, match="guest agent did not answer"):
        await wing.service.pauses.pause(sandbox.sandbox_id, require_healthy_guest=True)
    assert wing.service.registry.get(sandbox.sandbox_id) is sandbox
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING]
    assert "capture" not in wing.vm(sandbox).methods_called
    assert wing.network.live == [sandbox.slot]


async def test_a_wedged_guest_pauses_marked_and_resumes_only_by_a_boot(wing: Wing) -> None:
    sandbox = await wing.create()
    wing.envd.answering = False
    record = await wing.service.pauses.pause(sandbox.sandbox_id)
    assert record.state == PAUSED and record.envd_unresponsive_at_pause
    # Kept across restarts and handovers: the marker holds the record.
    assert Paused.read(sandbox.directory / PAUSED_MARKER).record.envd_unresponsive_at_pause
    await wing.settled()
    with pytest.raises(Conflict, match="cold boot"):
        await wing.service.pauses.resume(sandbox.sandbox_id)
    assert wing.service.registry.paused_ids() == [sandbox.sandbox_id]
    wing.envd.answering = True
    resumed = await wing.service.pauses.resume(sandbox.sandbox_id, reboot=True)
    assert not resumed.record.envd_unresponsive_at_pause
    assert not wing.records.records[sandbox.sandbox_id].envd_unresponsive_at_pause
    assert wing.records.states(sandbox.sandbox_id) == [RUNNING, PAUSED, RUNNING]
