"""Restore plans, one kind per case as RestoreSources makes them: which kinds make a directory,
what each one's overlay stands on, and that a kind holds nothing another kind has."""

from __future__ import annotations

import dataclasses

import pytest

from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.plans import (
    FromSnapshot,
    FromTemplate,
    Reset,
    Resume,
    backing_of,
    makes_directory,
)

from .conftest import FILESYSTEM, Wing


async def test_a_template_restore_makes_its_directory_over_the_template_disk(wing: Wing) -> None:
    spec = wing.spec()

    plan = wing.service.context.sources.from_template(spec, wing.template)

    assert isinstance(plan, FromTemplate) and plan.template is wing.template
    assert makes_directory(plan)
    assert backing_of(plan) == wing.template.disk
    assert plan.directory == wing.directory(spec.sandbox_id)


async def test_a_snapshot_restore_and_a_reset_stand_on_its_top_layer(wing: Wing) -> None:
    sandbox = await wing.create()
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    sources = wing.service.context.sources
    top = wing.service.context.disk.store.path(meta.layers[0])

    child = sources.from_snapshot(wing.spec(), meta, wing.template)
    reset = sources.for_reset(sandbox, meta)

    assert isinstance(child, FromSnapshot) and makes_directory(child)
    assert backing_of(child) == top
    # A reset keeps the sandbox's own directory and slot.
    assert isinstance(reset, Reset) and not makes_directory(reset)
    assert backing_of(reset) == top
    assert (reset.directory, reset.slot) == (sandbox.directory, sandbox.slot)


async def test_a_resume_runs_on_its_own_overlay_in_its_own_directory(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    paused = wing.service.registry.paused(sandbox.sandbox_id)
    assert paused is not None

    with PhaseTimer.operation("test.resume", paused.record) as timer:
        plan = wing.service.context.sources.for_resume(paused, 60, boots=True, timer=timer)

    assert isinstance(plan, Resume) and not makes_directory(plan)
    assert backing_of(plan) is None
    assert plan.directory == paused.directory


def test_no_kind_holds_another_kinds_part() -> None:
    fields = {kind: {f.name for f in dataclasses.fields(kind)}
              for kind in (FromTemplate, FromSnapshot, Resume, Reset)}

    assert "slot" in fields[Reset] and all("slot" not in fields[k]
                                           for k in (FromTemplate, FromSnapshot, Resume))
    assert all("template" not in fields[k] for k in (FromSnapshot, Resume, Reset))
    assert "backing" not in fields[Resume]
    with pytest.raises(TypeError):
        Resume(None, None, None, None, slot=None)  # type: ignore[arg-type,call-arg]
