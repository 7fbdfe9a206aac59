"""What delivering a webhook costs etcd: round trips (unary KV calls: range, put, txn, delete)
per delivered event, and events delivered per second, from a real etcd to a loopback receiver.

- burst: BENCH_EVENTS events of the webhook's key recorded at once, then delivered;
- trickle: BENCH_TRICKLE events, each recorded only once the one before was delivered (a quiet
  webhook: every event arrives after the deliverer's last write).

The deliverer has an etcd client of its own, whose KV calls are counted; the events' writer and
the watch (a stream, not a round trip) are not. Prints one JSON line.

Environment: BENCH_EVENTS (300), BENCH_TRICKLE (50).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from typing import Any

from _stats import emit

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.events import EventLog
from aenv_common.secrets.sealing import SecretsKey
from aenv_gateway.core.webhooks.deliverer import WebhookDeliverer
from aenv_gateway.core.webhooks.records import EtcdWebhookRecords
from aenv_gateway.core.webhooks.registry import WebhookRegistry, WebhookSpec
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Sender
from aenv_gateway.core.webhooks.targets import TargetPolicy
from aenv_testing.etcd import EtcdServer
from aenv_testing.webhook_receiver import Receiver, serving

EVENTS = int(os.environ.get("BENCH_EVENTS", "300"))
TRICKLE = int(os.environ.get("BENCH_TRICKLE", "50"))
KV_CALLS = ("Range", "Put", "Txn", "DeleteRange")
CREATED = "sandbox.lifecycle.created"


def counting(store: ClusterStore) -> Counter[str]:
    """Counts the store's unary KV calls from now on."""
    calls: Counter[str] = Counter()
    stub = store.client.kvstub

    def wrap(name: str) -> None:
        inner = getattr(stub, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return inner(*args, **kwargs)

        setattr(stub, name, call)

    for name in KV_CALLS:
        wrap(name)
    return calls


async def wait_for(receiver: Receiver, count: int, within_s: float = 300) -> None:
    deadline = time.monotonic() + within_s
    while len(receiver.accepted()) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(receiver.accepted())} of {count} delivered")
        await asyncio.sleep(0.005)


async def record(events: EventLog, sandbox: int) -> None:
    made = c.SandboxEvent(sandbox_id=f"sbx{sandbox}", owner_key_id="k1", template_id="base")
    made.type = c.SANDBOX_EVENT_TYPE_CREATED
    await events.record(made)


async def measure(server: EtcdServer) -> dict[str, Any]:
    settings = server.settings()
    writer = await ClusterStore.connect(settings)
    delivering = await ClusterStore.connect(settings)
    key = SecretsKey.generate()
    events = EventLog(writer, retention_s=600)
    registry = WebhookRegistry(EtcdWebhookRecords(writer), key, TargetPolicy(True), 100)
    deliverer = WebhookDeliverer(delivering, EventLog(delivering, retention_s=600), key,
                                 Sender(TargetPolicy(True), timeout_s=5), RetryPolicy(), ttl_s=5)
    out: dict[str, Any] = {}
    try:
        async with serving(Receiver()) as receiver:
            await registry.create("k1", WebhookSpec("h", receiver.url, [CREATED], "s1"))
            deliverer.start()
            await record(events, 0)
            await wait_for(receiver, 1)  # the leader runs and its worker follows
            calls = counting(delivering)
            started = time.monotonic()
            for i in range(EVENTS):
                await record(events, i)
            await wait_for(receiver, 1 + EVENTS)
            took = time.monotonic() - started
            out["burst"] = {"events": EVENTS, "events_per_s": round(EVENTS / took, 1),
                            "round_trips_per_event": round(sum(calls.values()) / EVENTS, 2),
                            "calls": dict(calls)}
            calls.clear()
            started = time.monotonic()
            for i in range(TRICKLE):
                await record(events, i)
                await wait_for(receiver, 2 + EVENTS + i)
            took = time.monotonic() - started
            out["trickle"] = {"events": TRICKLE,
                              "ms_per_event": round(took / TRICKLE * 1000, 2),
                              "round_trips_per_event": round(sum(calls.values()) / TRICKLE, 2),
                              "calls": dict(calls)}
    finally:
        await deliverer.stop()
        await delivering.close()
        await writer.close()
    return out


def main() -> None:
    with EtcdServer() as server:
        emit("webhook_delivery", asyncio.run(measure(server)))


if __name__ == "__main__":
    main()
