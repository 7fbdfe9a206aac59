"""envd's spans, brought back from the guest into the host's trace store.

The node agent's calls to envd carry the current W3C trace context (`traceparent`); envd
continues the trace and, having no way out of the guest (no route to any collector, by design),
answers with the span it made: `traceresponse` names its span id, `server-timing` its duration
(services/envd/aenv_envd/tracecontext.py). It is recorded here, with `service.name` envd, as a
child of the caller's span, with its caller's rollout attributes (`aenv.*`, see
aenv_common/rollout.py): a span about the sandbox, as its caller is. Its times are the host's
(the response's arrival minus envd's duration): the guest's clock is not trusted to match.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

ENVD_RESOURCE = Resource.create({"service.name": "envd"})
ROLLOUT_PREFIX = "aenv."
_TRACERESPONSE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_DURATION = re.compile(r"(?:^|,)\s*envd;dur=([0-9.]+)")


def traced(headers: Mapping[str, str]) -> dict[str, str]:
    """`headers` with the current trace context added (nothing when no span is current)."""
    carrier = dict(headers)
    propagate.inject(carrier)
    return carrier


def record_envd_span(
    name: str, response_headers: Mapping[str, str], provider: TracerProvider | None = None
) -> bool:
    """Record the span envd made for a request answered just now, through `provider` (default:
    this process's); False when it made none (no trace was current, an envd without trace
    context, or a response not naming this trace)."""
    current = trace.get_current_span()
    caller = current.get_span_context()
    tags = getattr(current, "attributes", None) or {}
    answered = _TRACERESPONSE.match(response_headers.get("traceresponse", ""))
    took = _DURATION.search(response_headers.get("server-timing", ""))
    found = provider or trace.get_tracer_provider()
    if (
        not caller.is_valid
        or answered is None
        or took is None
        or int(answered.group(1), 16) != caller.trace_id
        or not isinstance(found, TracerProvider)
    ):
        return False
    end_ns = time.time_ns()
    span = ReadableSpan(
        name=name,
        context=SpanContext(
            caller.trace_id,
            int(answered.group(2), 16),
            is_remote=True,
            trace_flags=TraceFlags(int(answered.group(3), 16)),
        ),
        parent=caller,
        resource=ENVD_RESOURCE,
        kind=SpanKind.SERVER,
        attributes={key: value for key, value in tags.items() if key.startswith(ROLLOUT_PREFIX)},
        start_time=end_ns - int(float(took.group(1)) * 1e6),
        end_time=end_ns,
    )
    # The SDK has no public call to export a span made elsewhere: its processors are what the
    # spans of this process go through (the trace files `aenv trace` reads, OTLP).
    found._active_span_processor.on_end(span)
    return True
