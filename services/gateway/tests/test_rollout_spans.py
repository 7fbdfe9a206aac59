"""A gateway request naming a sandbox is one of the sandbox's spans: the directory lookup tags
the request's span with the rollout attributes and links it to the sandbox's creator when the
request is in another trace (aenv_common/rollout.py), whichever way the lookup found it."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aenv.cluster.v1 import cluster_pb2
from aenv_gateway.cluster.directory import InMemoryClusterView, Owner, SandboxDirectory

TRAINER_SPAN = 0xB7AD6B7169203331
TRAINER = f"00-0af7651916cd43dd8448eb211c80319c-{TRAINER_SPAN:016x}-01"


def test_a_request_naming_a_sandbox_carries_its_rollout() -> None:
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(__name__)
    view = InMemoryClusterView()
    view.node_records["n1"] = cluster_pb2.NodeRecord(node_id="n1", nodeagent_address="a:1")
    directory = SandboxDirectory(view)
    mirrored = cluster_pb2.SandboxRecord(
        sandbox_id="sbx1", node_id="n1", metadata={"rollout_id": "r-7", "step": "2"},
        trace_parent=TRAINER)
    view.sandbox_records["sbx1"] = mirrored
    just_made = cluster_pb2.SandboxRecord(sandbox_id="sbx2", node_id="n1",
                                          metadata={"rollout_id": "r-7"})
    directory.remember(just_made, Owner("n1", "a:1", "p:1"))  # found before the mirror has it

    with tracer.start_as_current_span("POST /sandboxes/sbx1/timeout"):
        assert directory.find("sbx1") is not None
    with tracer.start_as_current_span("GET /sandboxes/sbx2"):
        assert directory.find("sbx2") is not None
    with tracer.start_as_current_span("GET /sandboxes/nope"):
        assert directory.find("nope") is None

    timeout, get, unknown = exporter.get_finished_spans()
    assert dict(timeout.attributes or {}) == {
        "aenv.sandbox_id": "sbx1", "aenv.rollout_id": "r-7", "aenv.step": "2"}
    assert [link.context.span_id for link in timeout.links] == [TRAINER_SPAN]
    assert dict(get.attributes or {}) == {"aenv.sandbox_id": "sbx2", "aenv.rollout_id": "r-7"}
    assert get.links == ()  # no creator's trace to link
    assert dict(unknown.attributes or {}) == {}
