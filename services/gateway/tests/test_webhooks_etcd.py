"""Webhooks delivered from a real etcd to real HTTP receivers on loopback: every event arrives
in order with a signature E2B's docs verify, a receiver that fails first gets the event again
until it accepts, the delivery log tells the attempts, a disabled webhook gets nothing and a
deleted one stops; of two deliverers racing, one delivers each event once, and when it steps
down (or dies mid-retry) the other resumes from the cursors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from prometheus_client import REGISTRY

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.errors import ResourceExhausted
from aenv_common.events import EventLog
from aenv_common.secrets.sealing import SecretsKey
from aenv_gateway.core.webhooks.deliverer import WebhookDeliverer
from aenv_gateway.core.webhooks.records import EtcdWebhookRecords
from aenv_gateway.core.webhooks.registry import WebhookChanges, WebhookRegistry, WebhookSpec
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Sender
from aenv_gateway.core.webhooks.targets import TargetPolicy
from aenv_testing.webhook_receiver import Receiver, serving

pytestmark = pytest.mark.etcd

CREATED, KILLED = "sandbox.lifecycle.created", "sandbox.lifecycle.killed"
FAST = RetryPolicy(initial_s=0.05, maximum_s=0.2, max_attempts=50, max_age_s=60)


async def until(check: Callable[[], bool | Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while True:
        result = check()
        if result if isinstance(result, bool) else await result:
            return
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.05)


class Cluster:
    """What a gateway runs for webhooks, over one etcd prefix; deliverers stopped at the end."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.key = SecretsKey.generate()
        self.events = EventLog(store, retention_s=600)
        self.registry = WebhookRegistry(EtcdWebhookRecords(store), self.key, TargetPolicy(True),
                                        100)
        self.deliverers: list[WebhookDeliverer] = []

    def deliverer(self, policy: RetryPolicy = FAST) -> WebhookDeliverer:
        made = WebhookDeliverer(self.store, self.events, self.key,
                                Sender(TargetPolicy(True), timeout_s=5), policy, ttl_s=2)
        self.deliverers.append(made)
        made.start()
        return made

    async def leader(self) -> WebhookDeliverer:
        await until(lambda: any(d.is_leader for d in self.deliverers), 15, "a leader")
        return next(d for d in self.deliverers if d.is_leader)

    async def hook(self, url: str, events: list[str], secret: str = "s1", owner: str = "k1",
                   enabled: bool = True) -> c.WebhookRecord:
        return await self.registry.create(owner, WebhookSpec("h", url, events, secret, enabled))

    async def event(self, sandbox_id: str, kind: int, owner: str = "k1") -> c.SandboxEvent:
        made = c.SandboxEvent(sandbox_id=sandbox_id, owner_key_id=owner, template_id="base")
        made.type = kind  # type: ignore[assignment]
        await self.events.record(made)
        return made


@pytest.fixture
async def cluster(cluster_store: ClusterStore) -> AsyncIterator[Cluster]:
    made = Cluster(cluster_store)
    try:
        yield made
    finally:
        for deliverer in made.deliverers:
            await deliverer.stop()


def verified(receiver: Receiver, secret: str, webhook_id: str) -> None:
    assert receiver.unsigned(secret) == []
    assert receiver.unsigned(secret + "x") != []
    for headers, _, _ in receiver.requests:
        assert headers["e2b-signature-version"] == "v1"
        assert headers["e2b-webhook-id"] == webhook_id
    delivery_ids = [headers["e2b-delivery-id"] for headers, _, _ in receiver.requests]
    assert len(set(delivery_ids)) == len(delivery_ids)


def counted(name: str, outcome: str) -> float:
    return REGISTRY.get_sample_value(name, {"outcome": outcome}) or 0.0


async def test_a_receiver_failing_twice_gets_every_event_in_order_signed(
    cluster: Cluster,
) -> None:
    failed = counted("aenv_webhook_attempts_total", "failed")
    delivered = counted("aenv_webhook_deliveries_total", "delivered")
    async with serving(Receiver([500, 500])) as receiver, serving(Receiver()) as off:
        hook = await cluster.hook(receiver.url, [CREATED, KILLED])
        disabled = await cluster.hook(off.url, [CREATED, KILLED], enabled=False)
        cluster.deliverer()
        await cluster.leader()
        created = await cluster.event("sbx1", c.SANDBOX_EVENT_TYPE_CREATED)
        await cluster.event("sbx1", c.SANDBOX_EVENT_TYPE_READY)  # no E2B name: not sent
        await cluster.event("sbx9", c.SANDBOX_EVENT_TYPE_CREATED, owner="k2")  # another key's
        killed = await cluster.event("sbx1", c.SANDBOX_EVENT_TYPE_KILLED)
        await until(lambda: len(receiver.accepted()) == 2, 20, "both events accepted")
        assert [(d["id"], d["type"], d["sandboxId"]) for d in receiver.accepted()] == [
            (created.event_id, CREATED, "sbx1"), (killed.event_id, KILLED, "sbx1")]
        assert [status for _, _, status in receiver.requests] == [500, 500, 200, 200]
        verified(receiver, "s1", hook.webhook_id)

        logged = await cluster.registry.deliveries("k1", hook.webhook_id, 10)
        assert [(d.event_id, d.attempts, d.last_status, d.delivered, d.gave_up)
                for d in logged] == [(killed.event_id, 1, 200, True, False),
                                     (created.event_id, 3, 200, True, False)]
        first, last = logged[1].first_attempt_at, logged[1].last_attempt_at
        assert first.ToNanoseconds() < last.ToNanoseconds()
        await until(lambda: _cursor(cluster, hook.webhook_id, killed.event_id), 5, "the cursor")
        assert off.requests == []
        assert await cluster.registry.deliveries("k1", disabled.webhook_id, 10) == []
    assert counted("aenv_webhook_attempts_total", "failed") - failed == 2
    assert counted("aenv_webhook_deliveries_total", "delivered") - delivered == 2


async def _cursor(cluster: Cluster, webhook_id: str, event_id: str) -> bool:
    return (await cluster.registry.get("k1", webhook_id)).cursor_event_id == event_id


async def test_a_deleted_webhook_stops_and_a_reenabled_one_skips_its_time_off(
    cluster: Cluster,
) -> None:
    async with serving(Receiver()) as gone, serving(Receiver()) as paused:
        doomed = await cluster.hook(gone.url, [CREATED])
        resting = await cluster.hook(paused.url, [CREATED])
        cluster.deliverer()
        await cluster.leader()
        first = await cluster.event("a", c.SANDBOX_EVENT_TYPE_CREATED)
        await until(lambda: len(gone.accepted()) == 1 and len(paused.accepted()) == 1, 20,
                    "the first event at both")
        await cluster.registry.delete("k1", doomed.webhook_id)
        await cluster.registry.update("k1", resting.webhook_id, WebhookChanges(enabled=False))
        await cluster.event("b", c.SANDBOX_EVENT_TYPE_CREATED)  # while one is off
        await asyncio.sleep(1.0)
        await cluster.registry.update("k1", resting.webhook_id, WebhookChanges(enabled=True))
        third = await cluster.event("c", c.SANDBOX_EVENT_TYPE_CREATED)
        await until(lambda: len(paused.accepted()) == 2, 20, "the event after re-enabling")
        await asyncio.sleep(0.5)
        assert [d["id"] for d in paused.accepted()] == [first.event_id, third.event_id]
        assert [d["id"] for d in gone.accepted()] == [first.event_id]
        prefix = EtcdWebhookRecords(cluster.store).deliveries_prefix(doomed.webhook_id)
        assert (await cluster.store.client.get_prefix(prefix)).kvs == []


async def test_two_deliverers_racing_deliver_each_event_once_and_hand_over(
    cluster: Cluster,
) -> None:
    async with serving(Receiver()) as receiver:
        hook = await cluster.hook(receiver.url, [CREATED, KILLED])
        cluster.deliverer()
        cluster.deliverer()
        leader = await cluster.leader()
        sent = [await cluster.event(f"s{i}", c.SANDBOX_EVENT_TYPE_CREATED) for i in range(5)]
        await until(lambda: len(receiver.accepted()) >= 5, 20, "five events")
        await until(lambda: _cursor(cluster, hook.webhook_id, sent[-1].event_id), 5, "cursor")
        assert sum(d.is_leader for d in cluster.deliverers) == 1
        assert [d.delivering for d in cluster.deliverers if d is not leader] == [set()]
        # The leader steps down; the other resumes from the cursor.
        await leader.stop()
        cluster.deliverers.remove(leader)
        after = [await cluster.event(f"t{i}", c.SANDBOX_EVENT_TYPE_KILLED) for i in range(2)]
        await until(lambda: len(receiver.accepted()) >= 7, 20, "the events after the handover")
        await asyncio.sleep(0.5)
        assert [d["id"] for d in receiver.accepted()] == [e.event_id for e in sent + after]
        assert cluster.deliverers[0].is_leader
        verified(receiver, "s1", hook.webhook_id)


async def test_a_leader_that_dies_mid_retry_leaves_the_event_to_the_next(
    cluster: Cluster,
) -> None:
    async with serving(Receiver(after=503)) as receiver:
        hook = await cluster.hook(receiver.url, [CREATED])
        first = cluster.deliverer()
        await cluster.leader()
        pending = await cluster.event("x", c.SANDBOX_EVENT_TYPE_CREATED)
        await until(lambda: len(receiver.requests) >= 2, 20, "attempts that fail")
        await first.stop()  # mid-retry: the cursor did not move
        cluster.deliverers.remove(first)
        assert (await cluster.registry.get("k1", hook.webhook_id)).cursor_event_id == ""
        receiver.after = 200
        cluster.deliverer()
        await until(lambda: len(receiver.accepted()) == 1, 20, "the event from the next leader")
        assert receiver.accepted()[0]["id"] == pending.event_id
        await until(lambda: _cursor(cluster, hook.webhook_id, pending.event_id), 5, "the cursor")


async def test_the_delivery_log_outlives_a_revoked_retention_lease(cluster: Cluster) -> None:
    async with serving(Receiver()) as receiver:
        hook = await cluster.hook(receiver.url, [CREATED])
        cluster.deliverer()
        await cluster.leader()
        await cluster.event("a", c.SANDBOX_EVENT_TYPE_CREATED)
        await until(lambda: len(receiver.accepted()) == 1, 20, "the first event")
        await cluster.store.client.revoke_lease(await cluster.events.retention_lease())
        # The revoked lease took the first event and its log; the next ones get a new lease.
        cluster.events = EventLog(cluster.store, retention_s=600)
        later = await cluster.event("b", c.SANDBOX_EVENT_TYPE_CREATED)
        await until(lambda: len(receiver.accepted()) == 2, 20, "the event after the revoke")
        logged = await cluster.registry.deliveries("k1", hook.webhook_id, 10)
        assert [(d.event_id, d.delivered) for d in logged] == [(later.event_id, True)]


async def test_two_gateways_racing_at_the_cap_create_only_one(cluster_store: ClusterStore) -> None:
    """Two registries (two gateways) over one etcd, the key one short of its cap: of creates
    racing from both, exactly one passes, every time; the others are told the cap."""
    gateways = [Cluster(cluster_store) for _ in range(2)]
    for gateway in gateways:
        gateway.registry = WebhookRegistry(EtcdWebhookRecords(cluster_store), gateway.key,
                                           TargetPolicy(True), 3)
    spec = WebhookSpec("h", "http://127.0.0.1:9/", [CREATED], "s1")
    for owner in ("r1", "r2", "r3"):
        for _ in range(2):
            await gateways[0].registry.create(owner, spec)
        outcomes = await asyncio.gather(
            *(g.registry.create(owner, spec) for g in gateways for _ in range(3)),
            return_exceptions=True)
        assert sum(isinstance(o, c.WebhookRecord) for o in outcomes) == 1, outcomes
        assert all(isinstance(o, (c.WebhookRecord, ResourceExhausted)) for o in outcomes)
        assert len(await gateways[1].registry.list(owner)) == 3
    # A delete makes room again.
    first = (await gateways[0].registry.list("r1"))[0]
    await gateways[1].registry.delete("r1", first.webhook_id)
    await gateways[0].registry.create("r1", spec)
    with pytest.raises(ResourceExhausted):
        await gateways[1].registry.create("r1", spec)
