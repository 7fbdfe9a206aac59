"""Experiment leases, bulk operations and the administrator's kill through a gateway over the
fake scheduler and node agent (leases kept in memory; over a real etcd in
test_leases_etcd.py): what the edges check, which creates they refuse, which sandboxes a filter
selects, and one outcome per sandbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.cluster.v1.cluster_pb2 import ApiKeyRecord
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.core.leases import InMemoryLeaseStore
from aenv_gateway.keys.records import key_digest

from .conftest import API_KEY, Stack

ADMIN = {"X-API-Key": API_KEY}
OTHER_KEY = "e2b_" + "feedface" * 4 + "0badf00d"
OTHER = {"X-API-Key": OTHER_KEY}
Stub = gateway_pb2_grpc.GatewayServiceStub


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    await stack.gateway.api_keys.put(ApiKeyRecord(key_id="k-other", name="trainer",
                                                  sha256=key_digest(OTHER_KEY)))
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as client:
        yield client


async def _lease(http: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> str:
    response = await http.post("/leases", json={"ttlSeconds": 60, **body}, headers=headers)
    assert response.status_code == 201, response.text
    lease_id: str = response.json()["leaseID"]
    return lease_id


async def _create(http: httpx.AsyncClient, headers: dict[str, str], **metadata: str) -> str:
    response = await http.post("/v2/sandboxes", json={"templateID": "base",
                                                      "metadata": metadata}, headers=headers)
    assert response.status_code == 201, response.text
    sandbox_id: str = response.json()["sandboxID"]
    return sandbox_id


@pytest.mark.parametrize("body, words", [
    ({}, "ttlSeconds is required"),
    ({"ttlSeconds": 4}, "between 5 and 3600"),
    ({"ttlSeconds": 3601}, "between 5 and 3600"),
    ({"ttlSeconds": "60"}, "integer"),
    ({"ttlSeconds": 60, "onExpiry": "explode"}, "kill or pause"),
    ({"ttlSeconds": 60, "metadata": {"a": 1}}, "strings"),
    ({"ttlSeconds": 60, "name": "n" * 129}, "128"),
])
async def test_a_malformed_lease_is_refused(
    http: httpx.AsyncClient, body: dict[str, Any], words: str
) -> None:
    response = await http.post("/leases", json=body, headers=ADMIN)
    assert response.status_code == 400
    assert words in response.json()["message"]


async def test_a_lease_is_created_read_renewed_listed_and_released(
    http: httpx.AsyncClient,
) -> None:
    created = await http.post("/leases", json={"ttlSeconds": 30, "onExpiry": "pause",
                                               "name": "run-7", "metadata": {"exp": "a"}},
                              headers=OTHER)
    assert created.status_code == 201
    lease = created.json()
    assert lease["leaseID"].startswith("lease-")
    assert (lease["ttlSeconds"], lease["onExpiry"], lease["name"], lease["metadata"],
            lease["sandboxCount"]) == (30, "pause", "run-7", {"exp": "a"}, 0)
    assert lease["expiresAt"].endswith("Z") and lease["createdAt"].endswith("Z")
    lease_id = lease["leaseID"]
    await _create(http, OTHER, **{"aenv.lease": lease_id})
    got = (await http.get(f"/leases/{lease_id}", headers=OTHER)).json()
    assert got["sandboxCount"] == 1
    renewed = await http.post(f"/leases/{lease_id}/renew", headers=OTHER)
    assert renewed.status_code == 200 and renewed.json()["leaseID"] == lease_id
    await _lease(http, ADMIN)
    # A key lists its own leases; the admin key every key's.
    assert [x["leaseID"] for x in (await http.get("/leases", headers=OTHER)).json()] == [lease_id]
    assert len((await http.get("/leases", headers=ADMIN)).json()) == 2
    assert (await http.delete(f"/leases/{lease_id}", headers=OTHER)).status_code == 204
    for gone in (await http.get(f"/leases/{lease_id}", headers=OTHER),
                 await http.post(f"/leases/{lease_id}/renew", headers=OTHER),
                 await http.delete(f"/leases/{lease_id}", headers=OTHER)):
        assert gone.status_code == 404


async def test_another_keys_lease_is_not_found(http: httpx.AsyncClient, stack: Stack) -> None:
    theirs = await _lease(http, ADMIN)
    for response in (await http.get(f"/leases/{theirs}", headers=OTHER),
                     await http.post(f"/leases/{theirs}/renew", headers=OTHER),
                     await http.delete(f"/leases/{theirs}", headers=OTHER)):
        assert response.status_code == 404
    # Nor may a sandbox live under it, nor under a lease that never was.
    for lease_id in (theirs, "lease-nosuchlease", "../sandboxes/x"):
        before = len(stack.nodeagent.specs)
        response = await http.post("/v2/sandboxes", json={
            "templateID": "base", "metadata": {"aenv.lease": lease_id}}, headers=OTHER)
        assert response.status_code == 404, response.text
        assert "not found" in response.json()["message"]
        assert len(stack.nodeagent.specs) == before  # refused before any placement
    assert (await http.get(f"/leases/{theirs}", headers=ADMIN)).status_code == 200


async def test_creates_under_a_lease_over_grpc(http: httpx.AsyncClient, stack: Stack) -> None:
    md = (("x-api-key", OTHER_KEY),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = Stub(channel)  # type: ignore[no-untyped-call]
        lease = await stub.CreateLease(gateway_pb2.CreateLeaseRequest(ttl_seconds=20), metadata=md)
        lease_id = lease.lease.lease_id
        assert lease.lease.on_expiry == cluster_pb2.LEASE_EXPIRY_ACTION_KILL
        assert lease.lease.owner_key_id == "k-other" and lease.expires_at.seconds > 0
        batch = await stub.CreateSandboxes(gateway_pb2.CreateSandboxesRequest(
            template_id="base", count=3, lease_id=lease_id), metadata=md)
        assert all(r.sandbox.lease_id == lease_id for r in batch.results)
        single = await stub.CreateSandbox(gateway_pb2.CreateSandboxRequest(
            template_id="base", lease_id=lease_id), metadata=md)
        assert [s.lease_id for s in stack.nodeagent.specs] == [lease_id] * 4
        # The metadata names the lease too: E2B's listing by metadata finds them.
        assert single.sandbox.metadata["aenv.lease"] == lease_id
        listed = await stub.ListSandboxes(gateway_pb2.ListSandboxesRequest(
            metadata={"aenv.lease": lease_id}), metadata=md)
        assert len(listed.sandboxes) == 4
        got = await stub.GetLease(gateway_pb2.GetLeaseRequest(lease_id=lease_id), metadata=md)
        assert got.sandbox_count == 4
        leases = await stub.ListLeases(gateway_pb2.ListLeasesRequest(), metadata=md)
        assert [x.lease.lease_id for x in leases.leases] == [lease_id]
        renewed = await stub.RenewLease(gateway_pb2.RenewLeaseRequest(lease_id=lease_id),
                                        metadata=md)
        assert renewed.expires_at.seconds >= got.expires_at.seconds
        with pytest.raises(grpc.aio.AioRpcError) as differ:
            await stub.CreateSandbox(gateway_pb2.CreateSandboxRequest(
                template_id="base", lease_id=lease_id,
                metadata={"aenv.lease": "lease-another"}), metadata=md)
        assert differ.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for ttl in (0, 4, 3601):
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await stub.CreateLease(gateway_pb2.CreateLeaseRequest(ttl_seconds=ttl),
                                       metadata=md)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await stub.ReleaseLease(gateway_pb2.ReleaseLeaseRequest(lease_id=lease_id), metadata=md)
        with pytest.raises(grpc.aio.AioRpcError) as lapsed:
            await stub.CreateSandbox(gateway_pb2.CreateSandboxRequest(
                template_id="base", lease_id=lease_id), metadata=md)
        assert lapsed.value.code() == grpc.StatusCode.NOT_FOUND
    # REST lists by lease too.
    listed_rest = await http.get("/v2/sandboxes", params={"leaseID": lease_id}, headers=OTHER)
    assert len(listed_rest.json()) == 4


async def test_a_lease_lapses_unless_renewed() -> None:
    now = [100.0]
    store = InMemoryLeaseStore(clock=lambda: now[0])
    record = await store.create(cluster_pb2.LeaseRecord(lease_id="lease-a", ttl_seconds=10))
    now[0] += 9
    assert await store.remaining(record) == pytest.approx(1)
    assert await store.renew(record) == 10
    now[0] += 9.5
    assert await store.get("lease-a") is not None
    now[0] += 0.5
    assert await store.get("lease-a") is None
    assert await store.renew(record) is None and await store.remaining(record) is None


async def test_bulk_kill_by_metadata_with_outcomes(http: httpx.AsyncClient, stack: Stack) -> None:
    mine = [await _create(http, OTHER, run="r1") for _ in range(3)]
    other_run = await _create(http, OTHER, run="r2")
    admins = await _create(http, ADMIN, run="r1")
    # One of the run's records names a node that is gone: its outcome alone fails.
    ghost = cluster_pb2.SandboxRecord(
        sandbox_id="ghost0000000000000000", node_id="gone", owner_key_id="k-other",
        state=cluster_pb2.SANDBOX_STATE_RUNNING, metadata={"run": "r1"})
    stack.view.sandbox_records[ghost.sandbox_id] = ghost
    response = await http.post("/sandboxes/kill", json={"metadata": {"run": "r1"}},
                               headers=OTHER)
    assert response.status_code == 200, response.text
    outcomes = {o["sandboxID"]: o for o in response.json()}
    assert set(outcomes) == {*mine, ghost.sandbox_id}  # never another key's, nor another run
    assert all(outcomes[s] == {"sandboxID": s, "code": 200, "status": "OK", "message": ""}
               for s in mine)
    assert (outcomes[ghost.sandbox_id]["code"], outcomes[ghost.sandbox_id]["status"]) == (
        404, "NOT_FOUND")
    assert set(stack.view.sandbox_records) == {other_run, admins, ghost.sandbox_id}
    # An empty filter is refused; `all` means every one of the key's.
    refused = await http.post("/sandboxes/kill", json={}, headers=OTHER)
    assert refused.status_code == 400 and "all" in refused.json()["message"]
    assert (await http.post("/sandboxes/kill", json={"state": ["dead"]},
                            headers=OTHER)).status_code == 400
    del stack.view.sandbox_records[ghost.sandbox_id]
    every = await http.post("/sandboxes/kill", json={"all": True}, headers=OTHER)
    assert [o["sandboxID"] for o in every.json()] == [other_run]
    assert set(stack.view.sandbox_records) == {admins}


async def test_bulk_pause_over_grpc(http: httpx.AsyncClient, stack: Stack) -> None:
    lease_id = await _lease(http, OTHER)
    under = [await _create(http, OTHER, **{"aenv.lease": lease_id}) for _ in range(2)]
    await _create(http, OTHER)
    md = (("x-api-key", OTHER_KEY),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = Stub(channel)  # type: ignore[no-untyped-call]
        paused = await stub.PauseSandboxes(gateway_pb2.PauseSandboxesRequest(
            filter=gateway_pb2.SandboxFilter(lease_id=lease_id), filesystem_only=True),
            metadata=md)
        assert sorted((o.sandbox_id, o.code) for o in paused.outcomes) == sorted(
            (s, "OK") for s in under)
        assert {p.sandbox_id for p in stack.nodeagent.pauses} == set(under)
        assert not any(p.keep_memory for p in stack.nodeagent.pauses)
        # Paused ones are not paused again (a pause selects running sandboxes by default).
        again = await stub.PauseSandboxes(gateway_pb2.PauseSandboxesRequest(
            filter=gateway_pb2.SandboxFilter(lease_id=lease_id)), metadata=md)
        assert list(again.outcomes) == []
        killed = await stub.KillSandboxes(gateway_pb2.KillSandboxesRequest(
            filter=gateway_pb2.SandboxFilter(
                lease_id=lease_id, states=[cluster_pb2.SANDBOX_STATE_PAUSED])), metadata=md)
        assert sorted(o.sandbox_id for o in killed.outcomes) == sorted(under)
        with pytest.raises(grpc.aio.AioRpcError) as empty:
            await stub.KillSandboxes(gateway_pb2.KillSandboxesRequest(), metadata=md)
        assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_admin_kill_of_another_keys_sandbox_is_a_death(
    http: httpx.AsyncClient, stack: Stack,
) -> None:
    theirs = await _create(http, OTHER)
    own = await _create(http, ADMIN)
    mine_by_them = await _create(http, OTHER)
    assert (await http.delete(f"/sandboxes/{theirs}", headers=ADMIN)).status_code == 204
    assert (await http.delete(f"/sandboxes/{own}", headers=ADMIN)).status_code == 204
    assert (await http.delete(f"/sandboxes/{mine_by_them}", headers=OTHER)).status_code == 204
    causes = {k.sandbox_id: (k.cause, k.detail) for k in stack.nodeagent.kills}
    assert causes == {
        theirs: (cluster_pb2.DEATH_CAUSE_ADMIN_KILL, "killed by an administrator"),
        own: (cluster_pb2.DEATH_CAUSE_UNSPECIFIED, ""),
        mine_by_them: (cluster_pb2.DEATH_CAUSE_UNSPECIFIED, ""),
    }
