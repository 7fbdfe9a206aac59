"""The wing's spans are the rollout's (aenv_common/rollout.py): every operation and phase on a
sandbox carries its rollout attributes; the record keeps its creator's traceparent; an operation
no call starts (the timeout's) is a child of the creator's span, in the trainer's trace; a call
in another trace keeps it, linked to the creator; fork children stay in their parent's trace."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan

from aenv_common.limits import DEFAULT_TIMEOUT_S
from aenv_common.rollout import parse_traceparent, rollout_attributes
from aenv_nodeagent import phases
from aenv_nodeagent.sandbox import kill
from aenv_nodeagent.sandbox.fork import _child_spec

from .conftest import Wing

TRAINER_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
TRAINER_SPAN = 0xB7AD6B7169203331
TRAINER = f"00-{TRAINER_TRACE:032x}-{TRAINER_SPAN:016x}-01"
OTHER = "00-1bf7651916cd43dd8448eb211c80319d-00f067aa0ba902b7-01"
ROLLOUT = {"rollout_id": "r-7", "group_id": "g-2", "step": "13"}


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The spans the wing records (its module tracers, on a provider of the test's own)."""
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(phases, "tracer", provider.get_tracer("phases"))
    monkeypatch.setattr(kill, "tracer", provider.get_tracer("kill"))
    yield exporter
    provider.shutdown()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def in_trainer_trace(span: ReadableSpan) -> bool:
    return span.context is not None and span.context.trace_id == TRAINER_TRACE


async def test_a_create_with_no_call_is_a_child_of_its_trace_parent_and_tagged(
    wing: Wing, spans: InMemorySpanExporter,
) -> None:
    sandbox = await wing.create(metadata=ROLLOUT, trace_parent=TRAINER)
    assert sandbox.record.trace_parent == TRAINER
    assert wing.records.records[sandbox.sandbox_id].trace_parent == TRAINER
    (create,) = named(spans, "sandbox.create")
    assert in_trainer_trace(create)
    assert create.parent is not None and create.parent.span_id == TRAINER_SPAN
    tags = rollout_attributes(sandbox.record)
    assert tags["aenv.rollout_id"] == "r-7"
    phases_of = [s for s in spans.get_finished_spans()
                 if s.parent is not None and create.context is not None
                 and s.parent.span_id == create.context.span_id]
    assert phases_of, "the create has phases"
    for span in [create, *phases_of]:
        assert {k: v for k, v in (span.attributes or {}).items() if k.startswith("aenv.")} == tags


async def test_the_timeouts_kill_is_in_the_trainers_trace(
    wing: Wing, spans: InMemorySpanExporter,
) -> None:
    sandbox = await wing.create(metadata=ROLLOUT, trace_parent=TRAINER)
    spans.clear()
    assert await wing.service.kills.expire_due(now=time.time() + DEFAULT_TIMEOUT_S + 1) == [
        sandbox.sandbox_id]
    (expire,) = named(spans, "sandbox.expire")
    (killed,) = named(spans, "sandbox.kill")
    assert in_trainer_trace(expire) and in_trainer_trace(killed)
    assert expire.parent is not None and expire.parent.span_id == TRAINER_SPAN
    assert killed.parent is not None and expire.context is not None
    assert killed.parent.span_id == expire.context.span_id
    assert (expire.attributes or {})["aenv.sandbox_id"] == sandbox.sandbox_id


async def test_a_call_in_another_trace_keeps_it_and_links_the_creator(
    wing: Wing, spans: InMemorySpanExporter,
) -> None:
    sandbox = await wing.create(metadata=ROLLOUT, trace_parent=TRAINER)
    other = parse_traceparent(OTHER)
    assert other is not None
    with trace.use_span(NonRecordingSpan(other)):  # a kill whose call came with OTHER
        await wing.service.kills.kill(sandbox.sandbox_id)
    (killed,) = named(spans, "sandbox.kill")
    assert killed.context is not None and killed.context.trace_id == other.trace_id
    assert killed.parent is not None and killed.parent.span_id == other.span_id
    assert [(link.context.trace_id, link.context.span_id) for link in killed.links] == [
        (TRAINER_TRACE, TRAINER_SPAN)]


async def test_fork_children_stay_in_their_parents_rollout_trace(
    wing: Wing, spans: InMemorySpanExporter,
) -> None:
    parent = await wing.create(metadata=ROLLOUT, trace_parent=TRAINER)
    # A FakeVm's capture is no QEMU stream: its children fail; the fork's span is the parent's.
    await wing.service.forks.fork(parent.sandbox_id, 1)
    (forked,) = named(spans, "sandbox.fork")
    assert in_trainer_trace(forked)
    assert (forked.attributes or {})["aenv.sandbox_id"] == parent.sandbox_id
    child = _child_spec(parent.record, "child1", "token", 60)
    assert (child.trace_parent, dict(child.metadata)) == (TRAINER, ROLLOUT)
