"""The client's leases over a fake gateway: `async with` renews every ttl/3 and releases on
exit, a renewal the gateway did not answer is tried at the next tick, one answered NOT_FOUND
marks the lease lapsed; bulk calls send their filter and answer one outcome per sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_client import GatewayClient, NotFound, RetryPolicy, sandbox_filter
from aenv_common.errors import Unavailable

from .fake_gateway import API_KEY, FakeGateway, serving


@dataclass
class LeaseGateway(FakeGateway):
    ttl_s: int = 1
    renewals: int = 0
    released: list[str] = field(default_factory=list)
    lapse_after: int = 0  # renewals answered before the lease is gone (0: never)
    renew_failures: int = 0  # the next renewals answer UNAVAILABLE
    filters: list[gateway_pb2.SandboxFilter] = field(default_factory=list)

    async def CreateLease(
        self, request: gateway_pb2.CreateLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateLeaseResponse:
        self._enter("CreateLease", str(request.ttl_seconds), context)
        return gateway_pb2.CreateLeaseResponse(lease=cluster_pb2.LeaseRecord(
            lease_id="lease-1", ttl_seconds=self.ttl_s, on_expiry=request.on_expiry))

    async def RenewLease(
        self, request: gateway_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.RenewLeaseResponse:
        self._enter("RenewLease", request.lease_id, context)
        if self.renew_failures:
            self.renew_failures -= 1
            raise Unavailable("etcd unavailable")
        if self.lapse_after and self.renewals >= self.lapse_after:
            raise NotFound(f'lease "{request.lease_id}" not found')
        self.renewals += 1
        return gateway_pb2.RenewLeaseResponse()

    async def ReleaseLease(
        self, request: gateway_pb2.ReleaseLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ReleaseLeaseResponse:
        self._enter("ReleaseLease", request.lease_id, context)
        self.released.append(request.lease_id)
        return gateway_pb2.ReleaseLeaseResponse()

    async def KillSandboxes(
        self, request: gateway_pb2.KillSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxesResponse:
        self._enter("KillSandboxes", "", context)
        self.filters.append(request.filter)
        outcomes = [gateway_pb2.SandboxOutcome(sandbox_id=sid, code="OK")
                    for sid in list(self.sandboxes)]
        self.sandboxes.clear()
        return gateway_pb2.KillSandboxesResponse(outcomes=outcomes)


@pytest.fixture
def gateway() -> LeaseGateway:
    return LeaseGateway()


@pytest.fixture
async def client(gateway: LeaseGateway) -> AsyncIterator[GatewayClient]:
    fast = RetryPolicy(attempts=1, backoff_s=0.01)  # a renewal is tried again at its next tick
    async with serving(gateway) as target, GatewayClient(
            target, API_KEY, timeout_s=5, retries=fast) as made:
        yield made


async def test_a_held_lease_is_renewed_and_released(
    client: GatewayClient, gateway: LeaseGateway,
) -> None:
    gateway.renew_failures = 1
    lease = await client.create_lease(30, on_expiry="pause", name="run")
    assert lease.record.on_expiry == cluster_pb2.LEASE_EXPIRY_ACTION_PAUSE
    async with lease:  # ttl 1 s: a renewal every 1/3 s, the first one failing
        for _ in range(100):
            if gateway.renewals >= 2:
                break
            await asyncio.sleep(0.05)
    tried = [c for c in gateway.calls if c[0] == "RenewLease"]
    assert gateway.renewals >= 2 and len(tried) == gateway.renewals + 1
    assert gateway.released == ["lease-1"] and lease.lapsed.is_set()
    renewals = gateway.renewals
    await asyncio.sleep(0.5)
    assert gateway.renewals == renewals  # nothing renews a released lease


async def test_a_lapsed_lease_stops_renewing(client: GatewayClient, gateway: LeaseGateway) -> None:
    gateway.lapse_after = 1
    async with await client.create_lease(30) as lease:
        await asyncio.wait_for(lease.lapsed.wait(), 3)
        with pytest.raises(NotFound):
            await lease.renew()
    assert gateway.renewals == 1


async def test_bulk_kill_sends_the_filter(client: GatewayClient, gateway: LeaseGateway) -> None:
    made = await client.create_sandbox("base", lease_id="lease-1")
    outcomes = await client.kill_sandboxes(sandbox_filter(
        metadata={"run": "r1"}, lease_id="lease-1", states=[cluster_pb2.SANDBOX_STATE_RUNNING]))
    assert [(o.sandbox_id, o.code) for o in outcomes] == [(made.sandbox_id, "OK")]
    sent = gateway.filters[0]
    assert (dict(sent.metadata), sent.lease_id, list(sent.states), sent.all) == (
        {"run": "r1"}, "lease-1", [cluster_pb2.SANDBOX_STATE_RUNNING], False)
    # Killed by this client: its NOT_FOUND from now on is not a death.
    with pytest.raises(NotFound) as gone:
        await client.get_sandbox(made.sandbox_id)
    assert type(gone.value) is NotFound
