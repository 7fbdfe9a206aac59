"""OpenTelemetry set-up shared by every service.

One trace follows a request from the SDK's HTTP call through gateway, scheduler and node agent
(W3C `traceparent` travels in HTTP headers and gRPC metadata). Instrumentors must be enabled before
any gRPC channel or server is created, so services call `setup_telemetry` first thing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from aenv_common.config import TelemetrySettings


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": {k: v for k, v in (span.attributes or {}).items()},
    }


class JsonLinesSpanExporter(SpanExporter):
    """Appends finished spans to `<dir>/<service>.jsonl`: the single-node trace store that
    `aenv trace` reads, with no collector to run."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_to_dict(s), default=str) + "\n" for s in spans)
        with self._lock, self._path.open("a", encoding="utf-8") as fh:
            fh.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _instrument_grpc() -> None:
    from opentelemetry.instrumentation.grpc import (
        GrpcAioInstrumentorClient,
        GrpcAioInstrumentorServer,
    )

    client = GrpcAioInstrumentorClient()  # type: ignore[no-untyped-call]
    if not client.is_instrumented_by_opentelemetry:
        client.instrument()
    server = GrpcAioInstrumentorServer()  # type: ignore[no-untyped-call]
    if not server.is_instrumented_by_opentelemetry:
        server.instrument()


def setup_telemetry(
    service: str,
    settings: TelemetrySettings,
    extra_exporters: Sequence[SpanExporter] = (),
) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if settings.trace_dir is not None:
        # Simple (synchronous) processor: spans are on disk as soon as they end, so a trace can
        # be read right after the request that produced it.
        exporter = JsonLinesSpanExporter(settings.trace_dir / f"{service}.jsonl")
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(settings.otlp_endpoint)))
    if settings.console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    for extra in extra_exporters:
        provider.add_span_processor(SimpleSpanProcessor(extra))
    trace.set_tracer_provider(provider)
    _instrument_grpc()
    return provider


def read_trace_files(trace_dir: Path) -> list[dict[str, Any]]:
    """All spans stored by the JSON-lines exporters of every service under `trace_dir`."""
    spans: list[dict[str, Any]] = []
    for path in sorted(trace_dir.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            spans.extend(json.loads(line) for line in fh if line.strip())
    return spans
