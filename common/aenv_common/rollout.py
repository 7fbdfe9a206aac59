"""Rollout traces: what ties the spans recorded about a sandbox to its trainer's trace and rollout.

A trainer names the rollout a sandbox serves in its metadata (`rollout_id`, `group_id`, `step`)
and passes its W3C trace context with the create: the `traceparent` HTTP header or gRPC metadata,
or, for SDKs that cannot send headers, the metadata key `traceparent` (the header wins when both
are given). Every service tags the spans it records about a sandbox with `rollout_attributes`, so
a rollout's sandboxes can be found by attribute (`aenv trace --rollout`). The sandbox keeps the
caller's traceparent (`SandboxSpec.trace_parent` -> `SandboxRecord.trace_parent`): operations no
call starts (its timeout, a lease's lapse, its death) are recorded under it by `sandbox_span`, so
they land in the trainer's trace too. docs/tracing.md says what a trainer sends and gets.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aenv.cluster.v1 import cluster_pb2

SANDBOX_ID = "aenv.sandbox_id"
# Metadata key -> span attribute; only the keys a sandbox's metadata holds become attributes.
METADATA_ATTRIBUTES = {
    "rollout_id": "aenv.rollout_id",
    "group_id": "aenv.group_id",
    "step": "aenv.step",
}
ROLLOUT_ID = METADATA_ATTRIBUTES["rollout_id"]
GROUP_ID = METADATA_ATTRIBUTES["group_id"]
STEP = METADATA_ATTRIBUTES["step"]
# The metadata key a create's W3C trace context may travel in.
TRACEPARENT = "traceparent"

_PROPAGATOR = TraceContextTextMapPropagator()


class AboutSandbox(Protocol):
    """A sandbox's spec or record: what its spans are tagged and parented with."""

    @property
    def sandbox_id(self) -> str: ...

    @property
    def metadata(self) -> Mapping[str, str]: ...

    @property
    def trace_parent(self) -> str: ...


def rollout_attributes(sandbox: AboutSandbox) -> dict[str, str]:
    """The span attributes of every span about `sandbox`: its id, and its rollout, group and
    step from its metadata (only those it has)."""
    attributes = {SANDBOX_ID: sandbox.sandbox_id} if sandbox.sandbox_id else {}
    for key, name in METADATA_ATTRIBUTES.items():
        if value := sandbox.metadata.get(key):
            attributes[name] = value
    return attributes


@functools.lru_cache(maxsize=4096)
def parse_traceparent(value: str) -> SpanContext | None:
    """The remote span a W3C `traceparent` names; None for an empty or malformed one (which a
    trace must survive: it is the caller's text). Cached: the gateway parses a sandbox's stored
    one on every request that names the sandbox."""
    if not value:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": value.strip()}))
    context = found.get_span_context()
    return context if context.is_valid else None


def format_traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def sandbox_context(sandbox: AboutSandbox) -> Context | None:
    """The context of this sandbox: its creator's span as the parent, for spans no call
    parents (None: its create carried no trace context)."""
    stored = parse_traceparent(sandbox.trace_parent)
    return trace.set_span_in_context(NonRecordingSpan(stored)) if stored is not None else None


def caller_span() -> SpanContext | None:
    """The remote span the current call came with (its `traceparent` header or gRPC metadata,
    which the server instrumentation made the parent of the call's span); None for a call
    that came with none."""
    parent = getattr(trace.get_current_span(), "parent", None)
    if isinstance(parent, SpanContext) and parent.is_remote and parent.is_valid:
        return parent
    return None


def _stored_link(sandbox: AboutSandbox, current: SpanContext) -> list[Link]:
    stored = parse_traceparent(sandbox.trace_parent)
    if stored is None or stored.trace_id == current.trace_id:
        return []
    return [Link(stored)]


@contextlib.contextmanager
def sandbox_span(
    tracer: trace.Tracer, name: str, sandbox: AboutSandbox, *,
    kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, str] | None = None,
) -> Iterator[Span]:
    """A span `name` about `sandbox`, tagged with its rollout attributes. Inside a call (a span
    is current), the call's trace keeps it, with a link to the sandbox's creator when that is
    another trace; with no call (its timeout, a lease's lapse, its death), it is a child of the
    sandbox's creator, in the trainer's trace."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid:
        context, links = None, _stored_link(sandbox, current)
    else:
        context, links = sandbox_context(sandbox), []
    with tracer.start_as_current_span(
            name, context=context, kind=kind, links=links,
            attributes={**(attributes or {}), **rollout_attributes(sandbox)}) as span:
        yield span


@contextlib.contextmanager
def create_span(
    tracer: trace.Tracer, name: str, spec: cluster_pb2.SandboxSpec
) -> Iterator[Span]:
    """The span of a create, and `spec.trace_parent` set: the call's own trace context (its
    header) when it came with one, else its metadata's `traceparent`, which then parents the
    create's span (linked to the call's span) and so everything the create asks of the
    scheduler and the node."""
    caller = caller_span()
    in_metadata = parse_traceparent(spec.metadata.get(TRACEPARENT, ""))
    context, links = None, []
    if caller is not None:
        spec.trace_parent = format_traceparent(caller)
    elif in_metadata is not None:
        spec.trace_parent = format_traceparent(in_metadata)
        context = trace.set_span_in_context(NonRecordingSpan(in_metadata))
        current = trace.get_current_span().get_span_context()
        links = [Link(current)] if current.is_valid else []
    with tracer.start_as_current_span(
            name, context=context, links=links, attributes=rollout_attributes(spec)) as span:
        yield span


def tag_current_span(sandbox: AboutSandbox) -> None:
    """Tag the current span (a request naming the sandbox) with the sandbox's rollout
    attributes, linked to its creator's trace when the request is in another. A span tagged
    with another sandbox already (a call about several) is left as it is."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    tagged = getattr(span, "attributes", None) or {}
    if tagged.get(SANDBOX_ID, sandbox.sandbox_id) != sandbox.sandbox_id:
        return
    if SANDBOX_ID not in tagged:
        for link in _stored_link(sandbox, span.get_span_context()):
            span.add_link(link.context)
    span.set_attributes(rollout_attributes(sandbox))
