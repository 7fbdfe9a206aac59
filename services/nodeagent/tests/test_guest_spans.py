"""The node agent's calls to a real envd process carry the trace: envd's span comes back and is
recorded in the trace files `aenv trace` reads, as envd's, in the caller's trace, a child of the
caller's span, with its caller's rollout attributes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from envd_harness import start_envd, stop_process
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from aenv_common.telemetry import JsonLinesSpanExporter, read_trace_files
from aenv_nodeagent.envd_client import EnvdClient

ROLLOUT = {"aenv.sandbox_id": "sbx1", "aenv.rollout_id": "r-7", "aenv.step": "3",
           "phase.note": "not the rollout's"}


@pytest.fixture
async def envd_address() -> AsyncIterator[tuple[str, int]]:
    process, url = start_envd()
    try:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        yield parts.hostname, parts.port
    finally:
        stop_process(process)


async def test_envd_spans_join_the_callers_trace(
    envd_address: tuple[str, int], tmp_path: Path
) -> None:
    host, port = envd_address
    provider = TracerProvider(resource=Resource.create({"service.name": "nodeagent"}))
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesSpanExporter(tmp_path / "nodeagent.jsonl"))
    )
    tracer = provider.get_tracer(__name__)
    token = secrets.token_hex(8)
    async with aiohttp.ClientSession() as session:
        envd = EnvdClient(session, tracer_provider=provider)
        await envd.wait_healthy(host, 20, port=port)
        with tracer.start_as_current_span("sandbox.envd_init", attributes=ROLLOUT) as caller:
            await envd.init(host, env_vars={}, access_token=token, port=port)
            await envd.sync(host, token, 10, port=port)
        await envd.init(host, env_vars={}, access_token=token, current_token=token, port=port)

    spans = read_trace_files(tmp_path)
    envd_spans = [span for span in spans if span["service"] == "envd"]
    context = caller.get_span_context()
    assert [span["name"] for span in envd_spans] == ["envd POST /init", "envd POST /sync"]
    for span in envd_spans:  # the untraced init made none
        assert span["trace_id"] == format(context.trace_id, "032x")
        assert span["parent_id"] == format(context.span_id, "016x")
        assert span["span_id"] != span["parent_id"]
        assert 0 <= span["end_ns"] - span["start_ns"] < 10 * 10**9
        # A span about the sandbox, as its caller: the rollout's attributes, nothing else.
        assert span["attributes"] == {k: v for k, v in ROLLOUT.items() if k.startswith("aenv.")}
