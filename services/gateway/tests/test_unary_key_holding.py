"""Every call is held by its API key, unary ones too, on both edges: a fork in flight is cut when
its key is revoked (UNAUTHENTICATED / 401), and a key's cap of open requests (the real default,
1,024) counts calls that answer once: the 1,025th concurrent call is refused (RESOURCE_EXHAUSTED
/ 429) while the others complete. The fake node agent holds forks and metrics calls open until
the test lets them go."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import grpc
import httpx
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.config import GatewaySettings

from .conftest import API_KEY, Stack, running_stack

ADMIN = {"X-API-Key": API_KEY}
CAP = GatewaySettings.model_fields["max_open_requests_per_key"].default
# Few streams per connection: a gRPC connection carrying more than its server allows at once
# has the surplus refused (seen as CANCELLED) or queued, which is not what is tested here.
CHANNELS = 32


@pytest.fixture
async def patient() -> AsyncIterator[Stack]:
    """A stack whose calls to the node wait long enough for CAP of them to pile up on a busy
    two-core host (the default deadline would end the first ones before the last arrive)."""
    async with running_stack(rpc_deadline_s=600) as stack:
        yield stack
Stub = gateway_pb2_grpc.GatewayServiceStub


@asynccontextmanager
async def _clients(stack: Stack) -> AsyncIterator[tuple[httpx.AsyncClient, Stub, str]]:
    """REST (as many connections as asked for) and gRPC clients, and a sandbox to call on."""
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=60,
                          limits=httpx.Limits(max_connections=None)) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel,
    ):
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        created = await http.post("/v2/sandboxes", headers=ADMIN, json={"templateID": "base"})
        assert created.status_code == 201, created.text
        yield http, stub, created.json()["sandboxID"]


async def _stored_key(http: httpx.AsyncClient) -> tuple[str, str]:
    created = await http.post("/admin/keys", headers=ADMIN, json={"name": "held"})
    assert created.status_code == 201, created.text
    return created.json()["key"], created.json()["keyID"]


async def _until(condition: Callable[[], bool], seconds: float, state: Callable[[], str]) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not condition():  # noqa: ASYNC110 - the fakes count, they signal nothing
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not reached in {seconds} s: {state()}") from None


async def _revoke_cuts(
    stack: Stack, http: httpx.AsyncClient, call: Callable[[str], Awaitable[object]],
) -> object:
    """Starts `call(key)` with a stored key, revokes the key once the node holds the fork, and
    returns what the call raised or answered, within a second of the revocation."""
    gate = stack.nodeagent.fork_gate = asyncio.Event()
    key, key_id = await _stored_key(http)
    pending = asyncio.ensure_future(call(key))
    await _until(lambda: len(stack.nodeagent.forks) == 1, 30, lambda: "no fork")
    cut_at = time.monotonic()
    assert (await http.delete(f"/admin/keys/{key_id}", headers=ADMIN)).status_code == 204
    try:
        async with asyncio.timeout(1):
            outcome: object = (await asyncio.gather(pending, return_exceptions=True))[0]
            return outcome
    finally:
        print(f"revoked key's fork ended in {(time.monotonic() - cut_at) * 1000:.1f} ms")
        gate.set()


async def test_revoking_a_key_cuts_its_unary_grpc_fork_in_flight(stack: Stack) -> None:
    async with _clients(stack) as (http, stub, sandbox_id):
        async def fork(key: str) -> object:
            return await stub.ForkSandbox(
                gateway_pb2.ForkSandboxRequest(sandbox_id=sandbox_id, count=2),
                metadata=(("x-api-key", key),))

        outcome = await _revoke_cuts(stack, http, fork)
    assert isinstance(outcome, grpc.aio.AioRpcError), outcome
    assert outcome.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "revoked" in (outcome.details() or "")


async def test_revoking_a_key_cuts_its_rest_fork_in_flight(stack: Stack) -> None:
    async with _clients(stack) as (http, _stub, sandbox_id):
        async def fork(key: str) -> object:
            return await http.post(f"/sandboxes/{sandbox_id}/fork", json={"count": 2},
                                   headers={"X-API-Key": key})

        outcome = await _revoke_cuts(stack, http, fork)
    assert isinstance(outcome, httpx.Response), outcome
    assert outcome.status_code == 401, outcome.text
    assert "revoked" in outcome.json()["message"]


async def _cap_counts(
    stack: Stack, call: Callable[[], Awaitable[object]], refused: Callable[[object], bool],
) -> None:
    """CAP + 1 concurrent calls of one key that the node holds open: exactly one is refused
    once CAP are in flight; the rest complete when the node lets them go."""
    gate = stack.nodeagent.metrics_gate = asyncio.Event()
    calls = [asyncio.ensure_future(call()) for _ in range(CAP + 1)]
    try:
        await _until(
            lambda: len(stack.nodeagent.metric_requests) == CAP
            and sum(c.done() for c in calls) == 1, 240,
            lambda: f"{len(stack.nodeagent.metric_requests)} at the node, "
                    f"{sum(c.done() for c in calls)} answered: "
                    f"{[c.exception() or c.result() for c in calls if c.done()][:3]}")
        await asyncio.sleep(0.2)  # nothing else is refused or answered meanwhile
        assert sum(c.done() for c in calls) == 1
    finally:
        gate.set()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert sum(refused(o) for o in outcomes) == 1
    assert len(stack.nodeagent.metric_requests) == CAP
    print(f"{CAP + 1} concurrent unary calls of one key: 1 refused, {CAP} served")


@pytest.mark.timeout(600)
async def test_a_keys_cap_counts_concurrent_unary_grpc_calls(patient: Stack) -> None:
    address = f"127.0.0.1:{patient.gateway.grpc_port}"
    async with (_clients(patient) as (_http, _stub, sandbox_id),
                contextlib.AsyncExitStack() as open_):
        # The calls spread over a few connections, as many clients' would be.
        channels = [await open_.enter_async_context(grpc.aio.insecure_channel(
            address, options=[("grpc.use_local_subchannel_pool", 1)])) for _ in range(CHANNELS)]
        stubs = itertools.cycle(
            [gateway_pb2_grpc.GatewayServiceStub(c)  # type: ignore[no-untyped-call]
             for c in channels])

        async def metrics() -> object:
            return await next(stubs).GetSandboxMetrics(
                gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sandbox_id),
                metadata=(("x-api-key", API_KEY),))

        def refused(outcome: object) -> bool:
            if isinstance(outcome, grpc.aio.AioRpcError):
                assert outcome.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, outcome
                return True
            assert isinstance(outcome, gateway_pb2.GetSandboxMetricsResponse), outcome
            return False

        await _cap_counts(patient, metrics, refused)


@pytest.mark.timeout(600)
async def test_a_keys_cap_counts_concurrent_unary_rest_calls(patient: Stack) -> None:
    async with _clients(patient) as (http, _stub, sandbox_id):
        async def metrics() -> object:
            return await http.get(f"/sandboxes/{sandbox_id}/metrics", headers=ADMIN)

        def refused(outcome: object) -> bool:
            assert isinstance(outcome, httpx.Response), outcome
            if outcome.status_code == 429:
                assert "requests open" in outcome.json()["message"]
                return True
            assert outcome.status_code == 200, outcome.text
            return False

        await _cap_counts(patient, metrics, refused)


async def test_every_method_refuses_a_call_without_a_valid_key(stack: Stack) -> None:
    service = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            streamed_in, streamed_out = method.client_streaming, method.server_streaming
            kind = {(False, False): channel.unary_unary, (False, True): channel.unary_stream,
                    (True, False): channel.stream_unary, (True, True): channel.stream_stream}
            call = kind[streamed_in, streamed_out](path, request_serializer=lambda _: b"",
                                                    response_deserializer=bytes)
            request: object = iter(()) if streamed_in else None
            for metadata in ((), (("x-api-key", "e2b_not-a-key"),)):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    answer = call(request, metadata=metadata)
                    if streamed_out:
                        async for _ in answer:
                            pass
                    else:
                        await answer
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method.name
    assert len(service.methods) >= 25
