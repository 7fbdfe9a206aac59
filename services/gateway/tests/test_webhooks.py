"""Webhooks without etcd: the retry schedule, the E2B payload and signature, the target policy
(SSRF), a worker's filtering, retries and cursor over fakes, and the registry's rules."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.cluster.store import Versioned
from aenv_common.errors import InvalidArgument, NotFound, ResourceExhausted
from aenv_common.events import e2b_event_type
from aenv_common.secrets.sealing import SealBroken, SecretsKey
from aenv_gateway.core.events.wire import e2b_event
from aenv_gateway.core.webhooks import payload
from aenv_gateway.core.webhooks.feed import Position
from aenv_gateway.core.webhooks.records import InMemoryWebhookRecords
from aenv_gateway.core.webhooks.registry import (
    WebhookChanges,
    WebhookRegistry,
    WebhookSpec,
    open_secret,
)
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Attempt
from aenv_gateway.core.webhooks.targets import TargetPolicy, TargetRefused
from aenv_gateway.core.webhooks.worker import Worker
from aenv_testing.webhook_receiver import e2b_documented_signature

CREATED, KILLED = "sandbox.lifecycle.created", "sandbox.lifecycle.killed"


# Retry schedule ------------------------------------------------------------------------------

def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = RetryPolicy(initial_s=1.0, maximum_s=300.0, rng=random.Random(7))
    for attempts, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0), (10, 300.0), (60, 300.0)):
        delays = [policy.delay(attempts) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), attempts
        assert max(delays) - min(delays) > ceiling / 10  # jittered, not lockstep


def test_gives_up_after_its_attempts_or_its_age() -> None:
    policy = RetryPolicy(max_attempts=3, max_age_s=60.0)
    assert not policy.exhausted(2, first_attempt_at=100.0, now=130.0)
    assert policy.exhausted(3, first_attempt_at=100.0, now=101.0)
    assert policy.exhausted(1, first_attempt_at=100.0, now=160.0)


# Payload and signature -----------------------------------------------------------------------

def event(kind: int, event_id: str = "00000000000000000001-0000000a", **fields: object
          ) -> c.SandboxEvent:
    made = c.SandboxEvent(event_id=event_id, sandbox_id="sbx1", owner_key_id="k1",
                          template_id="base", **fields)  # type: ignore[arg-type]
    made.type = kind  # type: ignore[assignment]
    made.time.FromSeconds(1_700_000_000)
    return made


def test_types_are_e2bs_and_a_paused_timeout_is_a_pause() -> None:
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_CREATED)) == CREATED
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_DIED)) == KILLED
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_TIMED_OUT, detail="killed")) == KILLED
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_TIMED_OUT, detail="paused")) == (
        "sandbox.lifecycle.paused")
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_SNAPSHOTTED)) == (
        "sandbox.lifecycle.checkpointed")
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_READY)) is None
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_FORKED)) is None
    assert e2b_event_type(event(c.SANDBOX_EVENT_TYPE_LOST)) is None


def test_the_body_is_e2bs_event_as_the_events_api_answers_it() -> None:
    died = event(c.SANDBOX_EVENT_TYPE_DIED, cause=c.DEATH_CAUSE_GUEST_OOM, detail="oom")
    died.metadata["run"] = "7"
    document = json.loads(payload.body(died, KILLED))
    assert document == e2b_event(died)
    assert document["type"] == KILLED and document["sandboxId"] == "sbx1"
    assert document["eventData"]["aenv_cause"] == "guest_oom"
    assert document["eventData"]["sandbox_metadata"] == {"run": "7"}
    paused = event(c.SANDBOX_EVENT_TYPE_TIMED_OUT, detail="paused")
    assert json.loads(payload.body(paused, e2b_event_type(paused) or ""))["type"] == (
        "sandbox.lifecycle.paused")


def test_the_signature_is_the_one_e2bs_docs_verify() -> None:
    raw = payload.body(event(c.SANDBOX_EVENT_TYPE_CREATED), CREATED)
    for secret in ("s3cret", "ünïcode", "x" * 100):
        signed = payload.signature(secret, raw)
        assert signed == e2b_documented_signature(secret, raw.decode())
        assert not signed.endswith("=") and len(signed) == 43
    assert payload.signature("a", raw) != payload.signature("b", raw)


# Targets -------------------------------------------------------------------------------------

def resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str) -> list[str]:
        if host not in table:
            raise TargetRefused(f"webhook host {host} does not resolve")
        return table[host]
    return resolve


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.10.10", "100.64.0.1",
    "::1", "fe80::1", "fc00::5", "::ffff:127.0.0.1", "::ffff:10.0.0.1"])
async def test_private_addresses_are_refused(address: str) -> None:
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(TargetRefused, match="public addresses only"):
        await TargetPolicy(False).check(f"http://{host}:8080/hook")
    assert await TargetPolicy(True).check(f"http://{host}/hook") == [address]


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "0.0.0.0", "224.0.0.1",
                                     "::ffff:169.254.169.254"])
async def test_metadata_unspecified_and_multicast_are_refused_even_when_private_is_allowed(
    address: str,
) -> None:
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(TargetRefused):
        await TargetPolicy(True).check(f"https://{host}/")


async def test_a_name_is_judged_by_every_address_it_resolves_to() -> None:
    policy = TargetPolicy(False, resolver({"hooks.example": ["93.184.216.34"],
                                           "mixed.example": ["93.184.216.34", "10.0.0.7"]}))
    assert await policy.check("https://hooks.example/e2b?token=t") == ["93.184.216.34"]
    with pytest.raises(TargetRefused, match=r"10\.0\.0\.7, a private address"):
        await policy.check("https://mixed.example/")
    with pytest.raises(TargetRefused, match="does not resolve"):
        await policy.check("https://nowhere.example/")


@pytest.mark.parametrize("url", ["ftp://93.184.216.34/", "93.184.216.34/hook", "http:///x",
                                 "http://93.184.216.34:99999/", "http://exa mple/",
                                 "https://" + "a" * 2100])
async def test_urls_not_of_a_webhooks_form_are_refused(url: str) -> None:
    with pytest.raises(TargetRefused):
        await TargetPolicy(True).check(url)


async def test_without_a_resolver_names_pass_and_literals_are_checked() -> None:
    policy = TargetPolicy(False, resolve=None)
    assert await policy.check("https://hooks.example/") == []
    with pytest.raises(TargetRefused):
        await policy.check("http://127.0.0.1/")


def test_a_position_orders_by_commit_then_by_id_within_one_commit() -> None:
    at = Position(10, "b")
    assert at.precedes(11, "a") and at.precedes(10, "c")
    assert not at.precedes(10, "b") and not at.precedes(10, "a") and not at.precedes(9, "z")
    assert Position(10).precedes(11, "") and not Position(10).precedes(10, "z")
    by_id = Position(-1, "b")
    assert by_id.precedes(1, "c") and not by_id.precedes(99, "a")


# A worker over fakes -------------------------------------------------------------------------

class FakeFeed:
    def __init__(self, events: list[c.SandboxEvent]) -> None:
        self.events = [(i + 10, e) for i, e in enumerate(events)]  # after the record's (1)
        self.started_at: list[Position] = []
        self.resumed = asyncio.Event()  # followed a second time: the first run's events are done

    async def position(self, scope: str, cursor: str, created_revision: int) -> Position:
        return Position(created_revision)

    async def follow(self, scope: str, after: Position
                     ) -> AsyncIterator[tuple[int, c.SandboxEvent]]:
        self.started_at.append(after)
        if len(self.started_at) > 1:
            self.resumed.set()
        for revision, item in self.events:
            if after.precedes(revision, item.event_id):
                yield revision, item


@dataclass
class FakeJournal:
    record: WebhookRecord
    # Every write in order: ("log", delivery) or ("cursor", event id).
    writes: list[tuple[str, object]] = field(default_factory=list)
    settled: int = 0
    revision: int = 5

    async def advance(self, webhook_id: str, cursor: str) -> bool:
        self.record.cursor_event_id = cursor
        self.writes.append(("cursor", cursor))
        return True

    async def log(self, delivery: WebhookDelivery) -> None:
        copy = WebhookDelivery()
        copy.CopyFrom(delivery)
        self.writes.append(("log", copy))

    async def settle(
        self, seen: Versioned[WebhookRecord], cursor: str, delivery: WebhookDelivery | None,
    ) -> Versioned[WebhookRecord] | None:
        # One transaction in etcd; here its writes in the order the worker relies on.
        self.settled += 1
        if delivery is not None:
            await self.log(delivery)
        await self.advance(seen.record.webhook_id, cursor)
        self.revision += 100
        return Versioned(self.record, self.revision, seen.create_revision, 0)


class FakeReceiver:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[tuple[str, str, bytes]] = []

    async def send(self, webhook_id: str, url: str, secret: str, body: bytes) -> Attempt:
        self.bodies.append((url, secret, body))
        status = self.statuses.pop(0) if self.statuses else 200
        return Attempt(status, "" if status == 200 else f"HTTP {status}", 0.01)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # yields, as a real sleep does


def worker_over(record: WebhookRecord, feed: FakeFeed, receiver: FakeReceiver,
                policy: RetryPolicy, clock: FakeClock) -> tuple[Worker, FakeJournal]:
    journal = FakeJournal(record)

    def current() -> Versioned[WebhookRecord] | None:
        return Versioned(record, 5, 1, 0) if record.webhook_id else None

    async def fresh() -> Versioned[WebhookRecord] | None:
        return current()

    worker = Worker("wh1", current, fresh, feed, receiver.send, journal, policy,
                    lambda r: "secret-" + r.name, clock=clock, sleep=clock.sleep)
    return worker, journal


def fresh_of(record: WebhookRecord):  # type: ignore[no-untyped-def]
    async def fresh() -> Versioned[WebhookRecord]:
        return Versioned(record, 5, 1, 0)
    return fresh


def hook(*events: str) -> WebhookRecord:
    return WebhookRecord(webhook_id="wh1", owner_key_id="k1", name="n", url="http://r/",
                         enabled=True, events=events)


async def run_until_fed(worker: Worker, feed: FakeFeed) -> None:
    """Runs the worker until it follows the (ended) feed again."""
    task = asyncio.create_task(worker.run())
    resumed = asyncio.ensure_future(feed.resumed.wait())
    await asyncio.wait([task, resumed], return_when=asyncio.FIRST_COMPLETED)
    resumed.cancel()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_only_subscribed_types_are_sent_and_the_cursor_follows_each() -> None:
    events = [event(c.SANDBOX_EVENT_TYPE_CREATED, "e1"), event(c.SANDBOX_EVENT_TYPE_READY, "e2"),
              event(c.SANDBOX_EVENT_TYPE_PAUSED, "e3"), event(c.SANDBOX_EVENT_TYPE_KILLED, "e4")]
    feed, receiver, clock = FakeFeed(events), FakeReceiver([]), FakeClock()
    worker, journal = worker_over(hook(CREATED, KILLED), feed, receiver, RetryPolicy(), clock)
    await run_until_fed(worker, feed)
    sent = [json.loads(body) for _, _, body in receiver.bodies]
    assert [(d["id"], d["type"]) for d in sent] == [("e1", CREATED), ("e4", KILLED)]
    assert all(secret == "secret-n" for _, secret, _ in receiver.bodies)
    assert journal.record.cursor_event_id == "e4"
    # The cursor moved past e1 only once e1 was logged delivered; skipped e2/e3 cost no write
    # within a second.
    kinds = [(k, v if k == "cursor" else v.event_id) for k, v in journal.writes]  # type: ignore[attr-defined]
    assert kinds == [("log", "e1"), ("cursor", "e1"), ("log", "e4"), ("cursor", "e4")]
    # The feed was resumed after the last event handled.
    assert feed.started_at[-1] == Position(13, "e4")


async def test_a_burst_reads_the_record_once_and_settles_each_event_in_one_write() -> None:
    events = [event(c.SANDBOX_EVENT_TYPE_CREATED, f"e{i}") for i in range(5)]
    feed, receiver, clock = FakeFeed(events), FakeReceiver([]), FakeClock()
    record = hook(CREATED)
    journal = FakeJournal(record)
    reads: list[int] = []

    async def fresh() -> Versioned[WebhookRecord]:
        reads.append(1)
        return Versioned(record, 5, 1, 0)

    worker = Worker("wh1", lambda: Versioned(record, 5, 1, 0), fresh, feed, receiver.send,
                    journal, RetryPolicy(), lambda r: "s", clock=clock, sleep=clock.sleep)
    await run_until_fed(worker, feed)
    assert [json.loads(b)["id"] for _, _, b in receiver.bodies] == [f"e{i}" for i in range(5)]
    # Every event was committed before the worker's first write: that write stands for the
    # record; each event's log and cursor went in one settle.
    assert len(reads) == 1 and journal.settled == 5
    assert journal.record.cursor_event_id == "e4"


async def test_failed_attempts_back_off_and_the_cursor_waits_for_the_2xx() -> None:
    feed = FakeFeed([event(c.SANDBOX_EVENT_TYPE_CREATED, "e1")])
    receiver, clock = FakeReceiver([500, 503]), FakeClock()
    policy = RetryPolicy(initial_s=1.0, maximum_s=8.0, rng=random.Random(1))
    worker, journal = worker_over(hook(CREATED), feed, receiver, policy, clock)
    await run_until_fed(worker, feed)
    assert len(receiver.bodies) == 3
    assert len({body for _, _, body in receiver.bodies}) == 1  # the same event each time
    logs = [v for k, v in journal.writes if k == "log"]
    assert [(d.attempts, d.last_status, d.delivered) for d in logs] == [  # type: ignore[attr-defined]
        (1, 500, False), (2, 503, False), (3, 200, True)]
    assert journal.writes[-1] == ("cursor", "e1")
    assert [k for k, _ in journal.writes].index("cursor") == 3  # after the 2xx only
    assert 0.5 <= clock.slept[0] <= 1.0 and 1.0 <= clock.slept[1] <= 2.0


async def test_an_event_is_given_up_after_its_attempts_and_the_next_one_goes() -> None:
    feed = FakeFeed([event(c.SANDBOX_EVENT_TYPE_CREATED, "e1"),
                     event(c.SANDBOX_EVENT_TYPE_CREATED, "e2")])
    receiver, clock = FakeReceiver([500, 500, 500]), FakeClock()
    worker, journal = worker_over(hook(CREATED), feed, receiver,
                                  RetryPolicy(max_attempts=3), clock)
    await run_until_fed(worker, feed)
    logs = [v for k, v in journal.writes if k == "log"]
    assert [(d.event_id, d.attempts, d.gave_up, d.delivered) for d in logs][-2:] == [  # type: ignore[attr-defined]
        ("e1", 3, True, False), ("e2", 1, False, True)]
    assert journal.record.cursor_event_id == "e2"


async def test_a_webhook_disabled_between_attempts_gets_no_more_and_keeps_its_cursor() -> None:
    record = hook(CREATED)
    feed, clock = FakeFeed([event(c.SANDBOX_EVENT_TYPE_CREATED, "e1")]), FakeClock()
    receiver = FakeReceiver([500, 500, 500])

    async def disable_on_sleep(seconds: float) -> None:
        record.enabled = False

    journal = FakeJournal(record)
    worker = Worker("wh1", lambda: Versioned(record, 5, 1, 0), fresh_of(record), feed,
                    receiver.send, journal, RetryPolicy(), lambda r: "s", clock=clock,
                    sleep=disable_on_sleep)
    await worker.run()  # returns: the webhook is off
    assert len(receiver.bodies) == 1
    assert record.cursor_event_id == ""


async def test_a_secret_that_does_not_open_fails_the_attempt_without_sending() -> None:
    feed, clock, receiver = FakeFeed([event(c.SANDBOX_EVENT_TYPE_CREATED, "e1")]), FakeClock(), \
        FakeReceiver([])
    record = hook(CREATED)
    journal = FakeJournal(record)

    def broken(_: WebhookRecord) -> str:
        raise SealBroken("no")

    worker = Worker("wh1", lambda: Versioned(record, 5, 1, 0), fresh_of(record), feed,
                    receiver.send, journal, RetryPolicy(max_attempts=2), broken, clock=clock,
                    sleep=clock.sleep)
    await run_until_fed(worker, feed)
    assert receiver.bodies == []
    last = [v for k, v in journal.writes if k == "log"][-1]
    assert last.gave_up and "secrets key" in last.last_error  # type: ignore[attr-defined]


# The registry --------------------------------------------------------------------------------

def registry(max_per_key: int = 100) -> tuple[WebhookRegistry, InMemoryWebhookRecords,
                                               SecretsKey]:
    records, key = InMemoryWebhookRecords(), SecretsKey.generate()
    policy = TargetPolicy(False, resolver({"hooks.example": ["93.184.216.34"],
                                           "inside.example": ["10.9.9.9"]}))
    return WebhookRegistry(records, key, policy, max_per_key), records, key


SPEC = WebhookSpec(name="mine", url="https://hooks.example/e2b", events=[KILLED, CREATED],
                   signature_secret="shh")


async def test_a_webhook_is_its_keys_and_its_secret_is_sealed() -> None:
    hooks, records, key = registry()
    made = await hooks.create("k1", SPEC)
    stored = (await records.get(made.webhook_id))
    assert stored is not None
    assert b"shh" not in stored.record.sealed_signature_secret
    assert open_secret(key, stored.record) == "shh"
    assert list(made.events) == [CREATED, KILLED] and made.enabled
    assert [w.webhook_id for w in await hooks.list("k1")] == [made.webhook_id]
    assert await hooks.list("k2") == []
    with pytest.raises(NotFound):
        await hooks.get("k2", made.webhook_id)
    with pytest.raises(NotFound):
        await hooks.delete("k2", made.webhook_id)
    # Another record's sealed secret does not open as this one's.
    other = await hooks.create("k1", SPEC)
    forged = WebhookRecord()
    forged.CopyFrom(other)
    forged.sealed_signature_secret = stored.record.sealed_signature_secret
    with pytest.raises(SealBroken):
        open_secret(key, forged)


@pytest.mark.parametrize(("spec", "words"), [
    (WebhookSpec("n", "https://hooks.example/", ["sandbox.lifecycle.exploded"], "s"),
     "unknown event types"),
    (WebhookSpec("n", "https://hooks.example/", [], "s"), "at least one"),
    (WebhookSpec("  ", "https://hooks.example/", [CREATED], "s"), "name"),
    (WebhookSpec("n", "https://hooks.example/", [CREATED], ""), "signatureSecret"),
    (WebhookSpec("n", "https://inside.example/", [CREATED], "s"), "private address"),
    (WebhookSpec("n", "http://169.254.169.254/latest", [CREATED], "s"), "metadata"),
])
async def test_a_bad_registration_is_refused(spec: WebhookSpec, words: str) -> None:
    hooks, records, _ = registry()
    with pytest.raises(InvalidArgument, match=words):
        await hooks.create("k1", spec)
    assert await records.every() == []


async def test_a_key_has_at_most_its_webhooks() -> None:
    hooks, _, _ = registry(max_per_key=2)
    await hooks.create("k1", SPEC)
    await hooks.create("k1", SPEC)
    with pytest.raises(ResourceExhausted):
        await hooks.create("k1", SPEC)
    await hooks.create("k2", SPEC)


async def test_an_update_changes_what_is_given_and_reenabling_skips_the_time_off() -> None:
    hooks, records, key = registry()
    made = await hooks.create("k1", SPEC)
    off = await hooks.update("k1", made.webhook_id, WebhookChanges(enabled=False, name="new"))
    assert not off.enabled and off.name == "new" and off.url == SPEC.url
    assert off.cursor_event_id == ""
    revision = await records.revision()
    on = await hooks.update("k1", made.webhook_id, WebhookChanges(enabled=True,
                                                                  signature_secret="new"))
    assert on.enabled and on.cursor_event_id == f"@{revision}"
    assert open_secret(key, on) == "new"
    with pytest.raises(InvalidArgument):
        await hooks.update("k1", made.webhook_id, WebhookChanges(url="http://10.0.0.1/"))
    with pytest.raises(NotFound):
        await hooks.update("k2", made.webhook_id, WebhookChanges(name="x"))
    await hooks.delete("k1", made.webhook_id)
    with pytest.raises(NotFound):
        await hooks.get("k1", made.webhook_id)
