"""Rollout traces on a real platform, exported over OTLP/HTTP to a real receiver.

The OpenTelemetry Collector and Jaeger are Go programs no registry here installs, so the receiver
is the test's own: an HTTP server on loopback that decodes each `ExportTraceServiceRequest` with
the `opentelemetry-proto` package, as a collector's OTLP/HTTP receiver does. A trainer's span
(an OpenTelemetry tracer in this process) parents two creates of one rollout: one with the
`traceparent` header (raw REST), one with `traceparent` in its metadata (the unmodified e2b SDK,
which cannot send headers). The receiver gets the gateway's, the node agent's and envd's spans in
the trainer's trace, tagged with the rollout; a timeout set later (a call of its own trace) ends
one of them, and that expiry's span is in the trainer's trace too, under the trainer's span.
`aenv trace --rollout` then draws both sandboxes from the platform's trace files."""

from __future__ import annotations

import asyncio
import gzip
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiohttp import web
from e2b import AsyncSandbox
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_testing.ports import free_port

from ..conftest import lone_platform_env, running_platform, sdk_environment_of

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns, pytest.mark.sdk,
              pytest.mark.asyncio(loop_scope="session")]

ROLLOUT = "r-" + secrets.token_hex(4)
GROUP = "g1"


@dataclass(frozen=True)
class Received:
    """One span as an OTLP receiver got it."""

    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")


class OtlpReceiver:
    """An OTLP/HTTP trace receiver (protobuf encoding, gzip or not) on loopback."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{address(self.port)}/v1/traces"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(Received(
                        service=str(resource.get("service.name")), trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(), parent_id=span.parent_span_id.hex(),
                        name=span.name,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple((link.trace_id.hex(), link.span_id.hex())
                                    for link in span.links)))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def about(self, sandbox_id: str, name: str | None = None) -> list[Received]:
        return [s for s in self.spans if s.attributes.get("aenv.sandbox_id") == sandbox_id
                and (name is None or s.name == name)]


@dataclass
class TracedPlatform:
    platform: Platform
    receiver: OtlpReceiver


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def traced(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TracedPlatform]:
    receiver = OtlpReceiver()
    await receiver.start()
    prefix = "art" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "x"
    env = lone_platform_env(
        prefix, AENV_NODEAGENT_NODE_ID="rollout-node", AENV_OTEL_OTLP_ENDPOINT=receiver.endpoint,
        # The batch exporter's delay: spans reach the receiver within a fraction of a second.
        OTEL_BSP_SCHEDULE_DELAY="200")
    try:
        async with running_platform(tmp_path_factory.mktemp("rollout"), env, prefix) as plat:
            yield TracedPlatform(plat, receiver)
    finally:
        await receiver.stop()


async def until_received(
    receiver: OtlpReceiver, sandbox_id: str, name: str, service: str, within_s: float = 60
) -> Received:
    deadline = time.monotonic() + within_s
    while True:
        found = [s for s in receiver.about(sandbox_id, name) if s.service == service]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {service} {name} of {sandbox_id} received"
        await asyncio.sleep(0.2)


async def test_a_trainers_trace_runs_through_its_sandboxes_over_otlp(
    traced: TracedPlatform,
) -> None:
    platform, receiver = traced.platform, traced.receiver
    trainer = TracerProvider().get_tracer("trainer")
    with trainer.start_as_current_span("rollout") as root:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
    trace_id = format(root.get_span_context().trace_id, "032x")
    root_id = format(root.get_span_context().span_id, "016x")
    api = {"X-API-Key": platform.api_key}
    made: list[str] = []
    async with httpx.AsyncClient(base_url=platform.api_url, timeout=300) as http:
        try:
            # With the header (raw REST, E2B's create).
            answer = await http.post("/sandboxes", headers=api | carrier, json={
                "templateID": "base", "timeout": 600,
                "metadata": {"rollout_id": ROLLOUT, "group_id": GROUP, "step": "0"}})
            assert answer.status_code == 201, answer.text
            by_header = answer.json()["sandboxID"]
            made.append(by_header)
            # With it in the metadata (the e2b SDK sends no trace headers).
            with sdk_environment_of(platform):
                sandbox = await AsyncSandbox.create("base", timeout=600, metadata={
                    "rollout_id": ROLLOUT, "group_id": GROUP, "step": "1",
                    "traceparent": carrier["traceparent"]})
            by_metadata = sandbox.sandbox_id
            made.append(by_metadata)

            for sandbox_id in made:
                for service, name in [("gateway", "sandbox.create"),
                                      ("nodeagent", "sandbox.create"),
                                      ("envd", "envd POST /init")]:
                    span = await until_received(receiver, sandbox_id, name, service)
                    assert span.trace_id == trace_id, (service, name)
                    assert span.attributes["aenv.rollout_id"] == ROLLOUT
                    assert span.attributes["aenv.group_id"] == GROUP
                    assert span.attributes["aenv.step"] in ("0", "1")
            in_trace = {s.span_id: s for s in receiver.spans if s.trace_id == trace_id}
            assert {"gateway", "scheduler", "nodeagent", "envd"} <= {
                s.service for s in in_trace.values()}
            # The metadata's traceparent parents the gateway's create span itself.
            create = await until_received(receiver, by_metadata, "sandbox.create", "gateway")
            assert create.parent_id == root_id
            # The header parents the gateway's request span, the create's parent.
            create = await until_received(receiver, by_header, "sandbox.create", "gateway")
            assert in_trace[create.parent_id].parent_id == root_id

            # A timeout set by a call of its own trace: the expiry is the trainer's.
            answer = await http.post(f"/sandboxes/{by_header}/timeout", headers=api,
                                     json={"timeout": 2})
            assert answer.status_code == 204, answer.text
            expire = await until_received(receiver, by_header, "sandbox.expire", "nodeagent")
            assert (expire.trace_id, expire.parent_id) == (trace_id, root_id)
            assert expire.attributes["aenv.rollout_id"] == ROLLOUT
            killed = await until_received(receiver, by_header, "sandbox.kill", "nodeagent")
            assert (killed.trace_id, killed.parent_id) == (trace_id, expire.span_id)
            made.remove(by_header)
            # The timeout call kept its own trace, linked to the trainer's span.
            calls = [s for s in receiver.about(by_header) if s.trace_id != trace_id]
            assert calls and all((trace_id, root_id) in s.links for s in calls), calls

            shown = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "aenv_cli", "trace", "--rollout", ROLLOUT,
                                 "--home", str(platform.home)],
                capture_output=True, text=True, timeout=60, env=os.environ | {"COLUMNS": "200"})
            assert shown.returncode == 0, shown.stderr
            text = shown.stdout
            assert f"rollout {ROLLOUT}  2 sandboxes" in text, text
            for expected in [f"group {GROUP}", "step 0", "step 1", f"sandbox {by_header}",
                             f"sandbox {by_metadata}", "envd envd POST /init",
                             "nodeagent sandbox.expire"]:
                assert expected in text, (expected, text)
            assert text.index("step 0") < text.index(by_header) < text.index("step 1") < \
                text.index(by_metadata)
        finally:
            for sandbox_id in made:
                await http.delete(f"/sandboxes/{sandbox_id}", headers=api)
