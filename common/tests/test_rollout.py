"""Rollout traces (aenv_common/rollout.py): the attributes every span about a sandbox carries, the
trace a create joins (its header's, else its metadata's `traceparent`), and the parent of a
sandbox's later spans (the call's, linked to its creator; with no call, its creator)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from aenv.cluster.v1 import cluster_pb2
from aenv_common.rollout import (
    create_span,
    format_traceparent,
    parse_traceparent,
    rollout_attributes,
    sandbox_span,
    tag_current_span,
)

TRAINER_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
TRAINER_SPAN = 0xB7AD6B7169203331
TRAINER = f"00-{TRAINER_TRACE:032x}-{TRAINER_SPAN:016x}-01"
OTHER = "00-1bf7651916cd43dd8448eb211c80319d-00f067aa0ba902b7-01"
ROLLOUT = {"rollout_id": "r-7", "group_id": "g-2", "step": "13"}


@pytest.fixture
def provider() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider.get_tracer(__name__), exporter
    tracer_provider.shutdown()


def record(trace_parent: str = TRAINER, **metadata: str) -> cluster_pb2.SandboxRecord:
    return cluster_pb2.SandboxRecord(sandbox_id="sbx1", metadata=metadata or ROLLOUT,
                                     trace_parent=trace_parent)


def remote(value: str) -> trace.Span:
    found = parse_traceparent(value)
    assert found is not None
    return NonRecordingSpan(found)


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def test_rollout_attributes_are_the_sandbox_and_what_its_metadata_has() -> None:
    assert rollout_attributes(record()) == {
        "aenv.sandbox_id": "sbx1", "aenv.rollout_id": "r-7", "aenv.group_id": "g-2",
        "aenv.step": "13"}
    assert rollout_attributes(record(rollout_id="r-8", owner="me")) == {
        "aenv.sandbox_id": "sbx1", "aenv.rollout_id": "r-8"}
    spec = cluster_pb2.SandboxSpec(sandbox_id="sbx2", metadata={"step": "0"})
    assert rollout_attributes(spec) == {"aenv.sandbox_id": "sbx2", "aenv.step": "0"}


def test_traceparent_parsing_refuses_what_is_not_w3c() -> None:
    parsed = parse_traceparent(f" {TRAINER} ")
    assert parsed is not None and parsed.is_remote
    assert (parsed.trace_id, parsed.span_id) == (TRAINER_TRACE, TRAINER_SPAN)
    assert format_traceparent(parsed) == TRAINER
    for bad in ("", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
                TRAINER.replace("-01", "-zz"), "00-abc-def-01"):
        assert parse_traceparent(bad) is None, bad


def test_with_no_call_a_sandbox_span_is_a_child_of_its_creator(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    with sandbox_span(tracer, "sandbox.expire", record(), attributes={"why": "timeout"}):
        pass
    span = only(exporter, "sandbox.expire")
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == TRAINER_TRACE
    assert span.parent.span_id == TRAINER_SPAN
    assert span.links == ()
    assert dict(span.attributes or {}) == {"why": "timeout", **rollout_attributes(record())}


def test_a_sandbox_without_a_creator_trace_starts_its_own(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    with sandbox_span(tracer, "sandbox.expire", record(trace_parent="not one")):
        pass
    span = only(exporter, "sandbox.expire")
    assert span.parent is None
    assert span.context is not None and span.context.trace_id != TRAINER_TRACE


def test_a_call_keeps_its_own_trace_with_a_link_to_the_creator(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    with tracer.start_as_current_span("call", context=trace.set_span_in_context(remote(OTHER))):
        with sandbox_span(tracer, "sandbox.kill", record()):
            pass
        with sandbox_span(tracer, "sandbox.pause", record(trace_parent=OTHER)):
            pass
    call, kill = only(exporter, "call"), only(exporter, "sandbox.kill")
    assert call.context is not None and kill.parent is not None
    assert kill.parent.span_id == call.context.span_id
    assert [(link.context.trace_id, link.context.span_id) for link in kill.links] == [
        (TRAINER_TRACE, TRAINER_SPAN)]
    assert only(exporter, "sandbox.pause").links == ()  # its creator's trace: no link


def test_a_create_with_the_header_is_in_its_trace_and_keeps_the_header(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    spec = cluster_pb2.SandboxSpec(sandbox_id="sbx1", metadata={**ROLLOUT, "traceparent": OTHER})
    # As the server instrumentation opens a request's span under its traceparent header.
    with tracer.start_as_current_span("POST /sandboxes",
                                      context=trace.set_span_in_context(remote(TRAINER))):
        with create_span(tracer, "sandbox.create", spec):
            pass
    create, request = only(exporter, "sandbox.create"), only(exporter, "POST /sandboxes")
    assert spec.trace_parent == TRAINER  # the header wins over the metadata
    assert create.parent is not None and request.context is not None
    assert create.parent.span_id == request.context.span_id
    assert create.links == ()
    assert dict(create.attributes or {}) == rollout_attributes(spec)


def test_a_create_with_traceparent_in_its_metadata_joins_that_trace(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    spec = cluster_pb2.SandboxSpec(sandbox_id="sbx1", metadata={"traceparent": TRAINER})
    with tracer.start_as_current_span("POST /sandboxes"):  # a request without the header
        with create_span(tracer, "sandbox.create", spec), tracer.start_as_current_span("place"):
            pass
    create, request = only(exporter, "sandbox.create"), only(exporter, "POST /sandboxes")
    assert spec.trace_parent == TRAINER
    assert create.context is not None and create.parent is not None
    assert (create.context.trace_id, create.parent.span_id) == (TRAINER_TRACE, TRAINER_SPAN)
    assert request.context is not None
    assert [link.context.span_id for link in create.links] == [request.context.span_id]
    place = only(exporter, "place")  # what the create asks of others is in the trainer's trace
    assert place.context is not None and place.context.trace_id == TRAINER_TRACE


def test_a_create_with_no_trace_context_keeps_none(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    spec = cluster_pb2.SandboxSpec(sandbox_id="sbx1", metadata={"traceparent": "nonsense"})
    with tracer.start_as_current_span("POST /sandboxes"), create_span(tracer, "c", spec):
        pass
    assert spec.trace_parent == ""
    assert only(exporter, "c").links == ()


def test_a_request_naming_a_sandbox_is_tagged_and_linked_once(
    provider: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = provider
    with tracer.start_as_current_span("DELETE /sandboxes/sbx1"):
        tag_current_span(record())
        tag_current_span(record())  # looked up twice: one link
    with tracer.start_as_current_span("POST /sandboxes/kill"):
        tag_current_span(record())
        tag_current_span(cluster_pb2.SandboxRecord(sandbox_id="sbx2", metadata={"step": "9"}))
    tag_current_span(record())  # no span: nothing to tag, no error
    kill = only(exporter, "DELETE /sandboxes/sbx1")
    assert dict(kill.attributes or {}) == rollout_attributes(record())
    assert [link.context.span_id for link in kill.links] == [TRAINER_SPAN]
    bulk = only(exporter, "POST /sandboxes/kill")  # about several: the first one's, unchanged
    assert dict(bulk.attributes or {}) == rollout_attributes(record())


def test_a_sampled_flag_survives_the_round_trip() -> None:
    context = SpanContext(TRAINER_TRACE, TRAINER_SPAN, is_remote=True,
                          trace_flags=TraceFlags(0))
    assert format_traceparent(context).endswith("-00")
    assert parse_traceparent(format_traceparent(context)) == context
