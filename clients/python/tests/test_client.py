"""The native client over a fake gateway: typed batch outcomes, retries only where safe (with
one idempotency key across attempts), deadlines, SandboxDied apart from NotFound, one channel,
and the sync wrapper."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_client import (
    GatewayClient,
    NotFound,
    RetryPolicy,
    SandboxDied,
    SyncGatewayClient,
    Unauthenticated,
    Unavailable,
)
from aenv_client.errors import DeadlineExceeded

from .fake_gateway import API_KEY, FakeGateway, serving

FAST = RetryPolicy(attempts=4, backoff_s=0.01)


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@pytest.fixture
async def client(gateway: FakeGateway) -> AsyncIterator[GatewayClient]:
    async with (
        serving(gateway) as target,
        GatewayClient(target, API_KEY, timeout_s=5, retries=FAST) as made,
    ):
        yield made


async def test_batch_outcomes_are_records_or_typed_errors(client: GatewayClient) -> None:
    outcomes = await client.create_sandboxes(
        "base",
        items=[
            gateway_pb2.CreateSandboxRequest(),
            gateway_pb2.CreateSandboxRequest(template_id="nope"),
        ],
    )
    made, missing = outcomes
    assert not isinstance(made, Exception) and made.sandbox_id
    assert type(missing) is NotFound and "nope" in missing.message


async def test_fork_outcomes_are_records_or_typed_errors(client: GatewayClient) -> None:
    parent = await client.create_sandbox("base")
    made, failed = await client.fork_sandbox(parent.sandbox_id, 2)
    assert not isinstance(made, Exception) and made.sandbox_id != parent.sandbox_id
    assert type(failed) is Unavailable and failed.message == "no room"


async def test_a_missing_file_is_not_a_dead_sandbox(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    record = await client.create_sandbox("base")
    assert await client.get_file(record.sandbox_id, "/hello") == b"hello"
    with pytest.raises(NotFound) as missing:
        await client.get_file(record.sandbox_id, "/nope")
    assert type(missing.value) is NotFound and "/nope" in missing.value.message
    gateway.die(record.sandbox_id)
    with pytest.raises(SandboxDied):
        await client.get_file(record.sandbox_id, "/hello")


async def test_set_timeout_answers_the_record_and_is_not_sent_again(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    sandbox = await client.create_sandbox("base")
    record = await client.set_timeout(sandbox.sandbox_id, 30)
    assert record.end_at.seconds == 1_000_030
    assert record.state == cluster_pb2.SANDBOX_STATE_RUNNING
    gateway.unavailable = 1
    with pytest.raises(Unavailable):
        await client.set_timeout(sandbox.sandbox_id, 60)
    assert [c[0] for c in gateway.calls].count("SetSandboxTimeout") == 2
    gateway.die(sandbox.sandbox_id)  # its timeout ended it
    with pytest.raises(SandboxDied):
        await client.set_timeout(sandbox.sandbox_id, 60)


async def test_a_timeout_of_zero_is_this_clients_own_end(client: GatewayClient) -> None:
    sandbox = await client.create_sandbox("base")
    ended = await client.set_timeout(sandbox.sandbox_id, 0)
    assert ended.state == cluster_pb2.SANDBOX_STATE_KILLING
    with pytest.raises(NotFound) as gone:
        await client.get_sandbox(sandbox.sandbox_id)
    assert type(gone.value) is NotFound  # ended by this client, not died under it


async def test_sandbox_metrics_are_typed_samples_of_a_window(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    sandbox = await client.create_sandbox("base")
    samples = await client.sandbox_metrics(sandbox.sandbox_id)
    assert [m.timestamp.seconds for m in samples] == [100, 101, 102]
    assert isinstance(samples[0], gateway_pb2.SandboxMetric)
    assert samples[0].cpu_used_pct == 50.0 and samples[0].mem_total == 1 << 30
    gateway.unavailable = 1  # a read: sent again
    window = await client.sandbox_metrics(sandbox.sandbox_id, start=7, end=8)
    assert [m.timestamp.seconds for m in window] == [7, 8]
    await client.sandbox_metrics(sandbox.sandbox_id, start=0)
    assert gateway.windows == [(None, None), (7, 8), (0, None)]
    gateway.die(sandbox.sandbox_id)
    with pytest.raises(SandboxDied):
        await client.sandbox_metrics(sandbox.sandbox_id)
    with pytest.raises(NotFound) as unknown:
        await client.sandbox_metrics("typo")
    assert type(unknown.value) is NotFound


async def test_creates_are_retried_with_one_key(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    gateway.unavailable = 2
    outcomes = await client.create_sandboxes("base", count=3)
    assert len(gateway.sandboxes) == 3 and len(outcomes) == 3
    keys = [key for method, key, _ in gateway.calls]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]
    gateway.unavailable = 1
    first = await client.create_sandbox("base", idempotency_key="mine")
    assert await client.create_sandbox("base", idempotency_key="mine") == first


async def test_kill_is_not_sent_again(client: GatewayClient, gateway: FakeGateway) -> None:
    sandbox = await client.create_sandbox("base")
    gateway.unavailable = 1
    with pytest.raises(Unavailable):
        await client.kill_sandbox(sandbox.sandbox_id)
    assert [c[0] for c in gateway.calls] == ["CreateSandbox", "KillSandbox"]


async def test_retries_give_up_after_the_attempts(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    gateway.unavailable = 10
    with pytest.raises(Unavailable):
        await client.get_sandbox("sb0")
    assert len(gateway.calls) == FAST.attempts


async def test_a_sandbox_gone_under_its_user_is_sandbox_died(
    client: GatewayClient, gateway: FakeGateway
) -> None:
    died, lost, killed = [await client.create_sandbox("base") for _ in range(3)]
    gateway.die(died.sandbox_id)
    with pytest.raises(SandboxDied):
        await client.get_sandbox(died.sandbox_id)
    gateway.die(lost.sandbox_id, lost=True)
    with pytest.raises(SandboxDied):
        await client.get_sandbox(lost.sandbox_id)
    await client.kill_sandbox(killed.sandbox_id)
    for unknown in (killed.sandbox_id, "typo"):
        with pytest.raises(NotFound) as err:
            await client.get_sandbox(unknown)
        assert type(err.value) is NotFound


async def test_every_call_has_a_deadline(client: GatewayClient, gateway: FakeGateway) -> None:
    sandbox = await client.create_sandbox("base")
    gateway.delay_s = 2
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        await client.get_sandbox(sandbox.sandbox_id, timeout_s=0.2)
    assert time.monotonic() - started < 1.5


async def test_one_channel_for_every_call(client: GatewayClient, gateway: FakeGateway) -> None:
    await asyncio.gather(*(client.create_sandbox("base") for _ in range(5)))
    await client.create_sandboxes("base", count=2)
    assert len({peer for _, _, peer in gateway.calls}) == 1


async def test_a_wrong_key_is_unauthenticated(gateway: FakeGateway) -> None:
    async with serving(gateway) as target, GatewayClient(target, "e2b_wrong") as client:
        with pytest.raises(Unauthenticated):
            await client.get_sandbox("sb0")


@pytest.fixture
def served_in_thread(gateway: FakeGateway) -> Iterator[str]:
    """The fake on a loop of its own thread, for a synchronous caller."""
    ready: Future[tuple[str, asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def serve() -> None:
        stop = asyncio.Event()
        async with serving(gateway) as target:
            ready.set_result((target, asyncio.get_running_loop(), stop))
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    target, loop, stop = ready.result(5)
    try:
        yield target
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)


def test_the_sync_client(served_in_thread: str, gateway: FakeGateway) -> None:
    with SyncGatewayClient(served_in_thread, API_KEY, retries=FAST) as client:
        outcomes = client.create_sandboxes("base", count=2, idempotency_key="sync-1")
        again = client.create_sandboxes("base", count=2, idempotency_key="sync-1")
        assert outcomes == again and len(gateway.sandboxes) == 2
        first = outcomes[0]
        assert not isinstance(first, Exception)
        assert client.set_timeout(first.sandbox_id, 5).end_at.seconds == 1_000_005
        assert len(client.sandbox_metrics(first.sandbox_id, start=1, end=1)) == 1
        for made in outcomes:
            assert not isinstance(made, Exception)
            client.kill_sandbox(made.sandbox_id)
        with pytest.raises(NotFound):
            client.get_sandbox(outcomes[0].sandbox_id)  # type: ignore[union-attr]
