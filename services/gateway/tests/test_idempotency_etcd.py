"""Idempotency keys shared by two gateway replicas over one real etcd: the same key through
both at once makes one sandbox (REST and gRPC, single and batch creates), a claim whose gateway
died expires with its lease, and another API key's same key is its own. Each gateway has its own
etcd connection and its own fake node, as replicas would."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from aenv.cluster.v1.cluster_pb2 import ApiKeyRecord
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_gateway.core.idempotency import scoped_name
from aenv_gateway.core.idempotency_etcd import EtcdKeyClaims
from aenv_gateway.core.templates.records import InMemoryTemplateRecords
from aenv_gateway.keys.records import key_digest

from .conftest import API_KEY, Stack, stack_over

pytestmark = pytest.mark.etcd
AUTH = {"X-API-Key": API_KEY}
CLAIM_TTL_S = 2


@pytest.fixture
async def stores(etcd_settings: CommonSettings) -> AsyncIterator[list[ClusterStore]]:
    async with contextlib.AsyncExitStack() as stack:
        connected = []
        for _ in range(2):
            store = await ClusterStore.connect(etcd_settings)
            stack.push_async_callback(store.close)
            connected.append(store)
        yield connected
        # Nothing of a test's keys outlives it (its prefix is its own, but etcd is shared).
        await connected[0].client.delete_prefix(etcd_settings.etcd_prefix.encode())


@pytest.fixture
async def replicas(stores: list[ClusterStore]) -> AsyncIterator[list[Stack]]:
    async with contextlib.AsyncExitStack() as stack:
        gateways = []
        for store in stores:
            claims = EtcdKeyClaims(store, ttl_s=600, claim_ttl_s=CLAIM_TTL_S)
            stack.push_async_callback(claims.close)
            running = stack_over(InMemoryTemplateRecords(), key_claims=claims)
            gateways.append(await stack.enter_async_context(running))
        yield gateways


def _made(gateways: list[Stack]) -> int:
    return sum(len(g.nodeagent.specs) for g in gateways)


async def _gated(gateways: list[Stack]) -> asyncio.Event:
    gate = asyncio.Event()
    for gateway in gateways:
        gateway.nodeagent.create_gate = gate
    return gate


async def test_one_key_through_both_gateways_at_once_is_one_sandbox(
    replicas: list[Stack],
) -> None:
    gate = await _gated(replicas)
    headers = {**AUTH, "Idempotency-Key": "retry-me"}
    async with httpx.AsyncClient(timeout=30) as http:
        calls = [
            asyncio.ensure_future(
                http.post(f"{g.url}/sandboxes", headers=headers, json={"templateID": "base"})
            )
            for g in replicas * 2
        ]
        await asyncio.sleep(1.0)  # every call is in: one creating, three waiting
        assert _made(replicas) == 1
        gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*calls), 30)
        again = await http.post(
            f"{replicas[1].url}/sandboxes", headers=headers, json={"templateID": "base"}
        )
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["sandboxID"] for a in [*answers, again]}) == 1
    assert _made(replicas) == 1


async def test_a_batch_retried_through_the_other_gateway_answers_the_same_sandboxes(
    replicas: list[Stack],
) -> None:
    first, second = replicas
    request = gateway_pb2.CreateSandboxesRequest(
        template_id="base", count=3, idempotency_key="rollout-1"
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{first.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        made = await stub.CreateSandboxes(request, metadata=(("x-api-key", API_KEY),))
    ids = [r.sandbox.sandbox_id for r in made.results]
    async with httpx.AsyncClient(timeout=30) as http:
        retried = await http.post(
            f"{second.url}/sandboxes/batch",
            headers={**AUTH, "Idempotency-Key": "rollout-1"},
            json={"templateID": "base", "count": 3},
        )
    assert [e["sandbox"]["sandboxID"] for e in retried.json()] == ids
    assert (len(first.nodeagent.specs), len(second.nodeagent.specs)) == (3, 0)


async def test_a_claim_whose_gateway_died_expires_and_the_key_creates_again(
    replicas: list[Stack],
    stores: list[ClusterStore],
) -> None:
    # A third replica claims the key and dies before its create answers (no release).
    dead = EtcdKeyClaims(stores[0], ttl_s=600, claim_ttl_s=CLAIM_TTL_S)
    assert await dead.claim(scoped_name("admin", "orphan")) is not None
    await dead.close(revoke=False)
    t0 = time.monotonic()
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(
            f"{replicas[1].url}/sandboxes",
            headers={**AUTH, "Idempotency-Key": "orphan"},
            json={"templateID": "base"},
        )
    waited = time.monotonic() - t0
    assert created.status_code == 201, created.text
    assert CLAIM_TTL_S - 1 <= waited < CLAIM_TTL_S + 10  # until the lease expired, not the TTL
    assert _made(replicas) == 1


async def test_another_api_keys_same_key_is_its_own_sandbox(replicas: list[Stack]) -> None:
    other_key = "e2b_" + "fedcba9876543210" * 2 + "76543210"
    for gateway in replicas:
        await gateway.gateway.api_keys.put(
            ApiKeyRecord(key_id="0a1b2c3d", name="other", sha256=key_digest(other_key))
        )
    body = {"templateID": "base"}
    async with httpx.AsyncClient(timeout=30) as http:
        mine = await http.post(
            f"{replicas[0].url}/sandboxes",
            headers={**AUTH, "Idempotency-Key": "shared-name"},
            json=body,
        )
        theirs = await http.post(
            f"{replicas[1].url}/sandboxes",
            json=body,
            headers={"X-API-Key": other_key, "Idempotency-Key": "shared-name"},
        )
        theirs_again = await http.post(
            f"{replicas[0].url}/sandboxes",
            json=body,
            headers={"X-API-Key": other_key, "Idempotency-Key": "shared-name"},
        )
    assert mine.json()["sandboxID"] != theirs.json()["sandboxID"]
    assert theirs.json()["sandboxID"] == theirs_again.json()["sandboxID"]
    assert _made(replicas) == 2
