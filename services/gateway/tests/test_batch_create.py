"""Batch create (gRPC CreateSandboxes, REST POST /sandboxes/batch) and idempotency keys on
creates: one result per sandbox, a bad item failing only itself, the same key answering the
same sandboxes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.errors import Internal, ResourceExhausted
from aenv_common.limits import MAX_BATCH_CREATE
from aenv_gateway.core.batch import BatchCreates
from aenv_gateway.core.sandboxes import CreateRequest

from .conftest import API_KEY, Stack

MD = (("x-api-key", API_KEY),)
AUTH = {"X-API-Key": API_KEY}
Item = gateway_pb2.CreateSandboxRequest


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


def _ids(response: gateway_pb2.CreateSandboxesResponse) -> list[str]:
    return [r.sandbox.sandbox_id for r in response.results]


async def test_count_makes_alike_sandboxes_with_the_shared_spec(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    response = await stub.CreateSandboxes(gateway_pb2.CreateSandboxesRequest(
        template_id="base", count=3, metadata={"run": "r1"}, timeout_seconds=60), metadata=MD)
    assert len(set(_ids(response))) == 3 and all(r.HasField("sandbox") for r in response.results)
    assert [dict(s.metadata) for s in stack.nodeagent.specs] == [{"run": "r1"}] * 3
    assert {s.timeout_seconds for s in stack.nodeagent.specs} == {60}
    listed = await stub.ListSandboxes(
        gateway_pb2.ListSandboxesRequest(metadata={"run": "r1"}), metadata=MD)
    assert sorted(s.sandbox_id for s in listed.sandboxes) == sorted(_ids(response))


async def test_a_bad_item_fails_alone_and_items_override_the_shared_spec(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    request = gateway_pb2.CreateSandboxesRequest(
        template_id="base", metadata={"run": "r2", "k": "shared"}, env_vars={"A": "1"},
        items=[Item(metadata={"k": "mine"}), Item(template_id="missing"),
               Item(timeout_seconds=30, env_vars={"B": "2"})])
    response = await stub.CreateSandboxes(request, metadata=MD)
    first, missing, last = response.results
    assert dict(first.sandbox.metadata) == {"run": "r2", "k": "mine"}
    assert (missing.error.code, missing.error.status) == (404, "NOT_FOUND")
    assert "missing" in missing.error.message
    assert last.sandbox.end_at.seconds - last.sandbox.started_at.seconds == 30
    # Made concurrently: the node agent saw the creates in any order.
    specs = {s.sandbox_id: s for s in stack.nodeagent.specs}
    assert dict(specs[last.sandbox.sandbox_id].env_vars) == {"A": "1", "B": "2"}
    assert dict(specs[first.sandbox.sandbox_id].env_vars) == {"A": "1"}


async def test_capacity_errors_are_per_item(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    stack.scheduler.templates.add("big")
    stack.scheduler.failures["big"] = ResourceExhausted("no node has room")
    response = await stub.CreateSandboxes(gateway_pb2.CreateSandboxesRequest(
        items=[Item(template_id="big"), Item(template_id="base")]), metadata=MD)
    full, made = response.results
    assert (full.error.code, full.error.status) == (429, "RESOURCE_EXHAUSTED")
    assert made.sandbox.template_id == "base"


async def test_the_same_key_answers_the_same_sandboxes_and_retries_failed_items(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    request = gateway_pb2.CreateSandboxesRequest(
        template_id="base", items=[Item(), Item(template_id="later"), Item()],
        idempotency_key="rollout-7")
    first = await stub.CreateSandboxes(request, metadata=MD)
    assert first.results[1].error.status == "NOT_FOUND"
    stack.scheduler.templates.add("later")
    again = await stub.CreateSandboxes(request, metadata=MD)
    assert [_ids(again)[0], _ids(again)[2]] == [_ids(first)[0], _ids(first)[2]]
    assert again.results[1].sandbox.template_id == "later"
    assert len(stack.nodeagent.specs) == 3  # two, then the one that failed
    other = await stub.CreateSandboxes(
        gateway_pb2.CreateSandboxesRequest(template_id="base", count=1), metadata=MD)
    assert _ids(other)[0] not in _ids(first)


async def test_single_create_with_a_key_answers_the_same_sandbox(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    request = gateway_pb2.CreateSandboxRequest(template_id="base", idempotency_key="k-1")
    first = await stub.CreateSandbox(request, metadata=MD)
    again = await stub.CreateSandbox(request, metadata=MD)
    assert first.sandbox.sandbox_id == again.sandbox.sandbox_id
    assert len(stack.nodeagent.specs) == 1


@pytest.mark.parametrize("request_", [
    gateway_pb2.CreateSandboxesRequest(template_id="base", count=MAX_BATCH_CREATE + 1),
    gateway_pb2.CreateSandboxesRequest(template_id="base", count=2, items=[Item(), Item()]),
    gateway_pb2.CreateSandboxesRequest(template_id="base", idempotency_key="Not OK"),
    gateway_pb2.CreateSandboxesRequest(items=[Item(template_id="base"), Item()]),
    gateway_pb2.CreateSandboxesRequest(template_id="base", timeout_seconds=10**6),
], ids=["too-many", "count-and-items", "bad-key", "no-template", "timeout"])
async def test_malformed_batches_are_refused_whole_before_any_create(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub,
    request_: gateway_pb2.CreateSandboxesRequest,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateSandboxes(request_, metadata=MD)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stack.nodeagent.specs == []


async def test_single_create_refuses_a_malformed_key(
    stub: gateway_pb2_grpc.GatewayServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateSandbox(
            gateway_pb2.CreateSandboxRequest(template_id="base", idempotency_key="a/0"),
            metadata=MD)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_rest_batch_entries_and_key(stack: Stack) -> None:
    body = {"templateID": "base", "metadata": {"run": "r3"},
            "items": [{"envVars": {"A": "1"}}, {"templateID": "missing"}]}
    headers = {**AUTH, "Idempotency-Key": "rest-batch"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await http.post("/sandboxes/batch", headers=headers, json=body)
        assert created.status_code == 201
        made, missing = created.json()
        assert made["sandbox"]["templateID"] == "base" and made["sandbox"]["envdAccessToken"]
        assert missing == {"error": {"code": 404, "message": 'template "missing" not found'}}
        again = await http.post("/sandboxes/batch", headers=headers, json=body)
        assert again.json()[0]["sandbox"]["sandboxID"] == made["sandbox"]["sandboxID"]
        both = await http.post("/sandboxes/batch", headers=AUTH,
                               json={"templateID": "base", "count": 2, "items": [{}]})
        assert both.status_code == 400 and "not both" in both.json()["message"]
        bad_key = await http.post("/sandboxes/batch", json={"templateID": "base"},
                                  headers={**AUTH, "Idempotency-Key": "Not/OK"})
        assert bad_key.status_code == 400 and "Idempotency-Key" in bad_key.json()["message"]
        counted = await http.post("/sandboxes/batch", headers=AUTH,
                                  json={"templateID": "base", "count": 2})
        assert [list(e) for e in counted.json()] == [["sandbox"], ["sandbox"]]
    assert len(stack.nodeagent.specs) == 3


class _Barrier:
    """Creates that answer only once `n` of them are in flight at the same time."""

    def __init__(self, n: int) -> None:
        self.n, self.waiting, self.all_in = n, 0, asyncio.Event()

    def check_create(self, request: CreateRequest) -> None:
        pass

    async def create(self, request: CreateRequest) -> cluster_pb2.SandboxRecord:
        self.waiting += 1
        if self.waiting == self.n:
            self.all_in.set()
        await self.all_in.wait()
        if request.template_id == "bug":
            raise RuntimeError("a bug in one create")
        return cluster_pb2.SandboxRecord(sandbox_id=f"sb-{request.idempotency_key}")


async def test_items_are_created_concurrently_and_a_bug_fails_only_its_item() -> None:
    batch = BatchCreates(_Barrier(3))
    requests = [CreateRequest(template_id=t, timeout_s=60) for t in ("base", "bug", "base")]
    made, bug, last = await asyncio.wait_for(batch.create(requests, "k"), 5)
    assert isinstance(made, cluster_pb2.SandboxRecord) and made.sandbox_id == "sb-k/0"
    assert isinstance(bug, Internal)
    assert isinstance(last, cluster_pb2.SandboxRecord) and last.sandbox_id == "sb-k/2"
