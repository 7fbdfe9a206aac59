"""Every state change of a sandbox is announced by the wing that makes it (sandbox/events.py),
with the sandbox's identity; an event's failure never fails the operation; a kill with a cause
is a death with its certificate."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import Internal, Unavailable
from aenv_nodeagent.restart.recovery import BACK, NOT_SURVIVED_DETAIL, recover
from aenv_nodeagent.sandbox.events import EVENTS_TOTAL, SandboxEvents
from aenv_nodeagent.sandbox.model import Chain, Paused
from aenv_testing.records import MemoryRecords

from ..fakes.events import RecordingEvents
from ..fakes.network import FakeNetwork
from .conftest import FILESYSTEM, NODE_ID, Wing

CREATED, READY = c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_READY
PAUSED, RESUMED = c.SANDBOX_EVENT_TYPE_PAUSED, c.SANDBOX_EVENT_TYPE_RESUMED
SNAPSHOTTED = c.SANDBOX_EVENT_TYPE_SNAPSHOTTED
KILLED, TIMED_OUT = c.SANDBOX_EVENT_TYPE_KILLED, c.SANDBOX_EVENT_TYPE_TIMED_OUT
UPDATED, DIED = c.SANDBOX_EVENT_TYPE_UPDATED, c.SANDBOX_EVENT_TYPE_DIED


def recorded(wing: Wing) -> RecordingEvents:
    events = wing.service.context.events
    assert isinstance(events, RecordingEvents)
    return events


async def settled(wing: Wing) -> RecordingEvents:
    """The wing's events, once those written in the background (CREATED) are."""
    events = recorded(wing)
    await events.close()
    return events


def failed(type_name: str) -> float:
    return EVENTS_TOTAL.labels(type_name, "failed")._value.get()  # type: ignore[no-any-return]


async def test_a_create_announces_created_then_ready_with_the_sandboxs_identity(
    wing: Wing,
) -> None:
    provider = TracerProvider()
    with provider.get_tracer("test").start_as_current_span("client") as span:
        sandbox = await wing.create(
            catalog_template_id="tpl-1", metadata={"rollout_id": "r1"}, owner_key_id="key-1",
            lease_id="lease-1")
    trace_id = format(span.get_span_context().trace_id, "032x")
    events = (await settled(wing)).of(sandbox.sandbox_id)
    assert [e.type for e in events] == [CREATED, READY]
    for event in events:
        assert (event.sandbox_id, event.node_id, event.template_id) == (
            sandbox.sandbox_id, NODE_ID, "tpl-1")
        assert dict(event.metadata) == {"rollout_id": "r1"}
        assert (event.owner_key_id, event.lease_id, event.trace_id) == ("key-1", "lease-1",
                                                                        trace_id)
        assert event.event_id and event.time.ToNanoseconds() > 0
    assert events[0].event_id < events[1].event_id


async def test_the_template_is_the_template_id_without_a_catalog_one(wing: Wing) -> None:
    sandbox = await wing.create()
    assert trace.get_current_span().get_span_context().is_valid is False
    events = (await settled(wing)).of(sandbox.sandbox_id)
    assert {(e.template_id, e.trace_id) for e in events} == {("base", "")}


async def test_each_operation_announces_its_event(wing: Wing) -> None:
    sandbox = await wing.create()
    sandbox_id = sandbox.sandbox_id
    await wing.service.changes.set_timeout(sandbox_id, 600)
    await wing.service.changes.update_network(
        sandbox_id, c.NetworkPolicy(allow_internet_access=False))
    meta = await wing.service.snapshots.create(sandbox_id, filesystem_only=True)
    await wing.service.forks.reset(sandbox_id, meta.snapshot_id)
    await wing.service.pauses.pause(sandbox_id, FILESYSTEM)
    await wing.settled()
    await wing.service.pauses.resume(sandbox_id)
    await wing.service.kills.kill(sandbox_id)

    events = (await settled(wing)).of(sandbox_id)
    assert [(e.type, e.detail) for e in events] == [
        (CREATED, ""), (READY, ""), (UPDATED, "timeout 600 s"), (UPDATED, "network updated"),
        (SNAPSHOTTED, f"snapshot {meta.snapshot_id}"),
        (UPDATED, f"reset to snapshot {meta.snapshot_id}"), (PAUSED, ""), (RESUMED, ""),
        (KILLED, "")]
    # Each record publish carried its event: one transaction, no write of its own.
    assert len(wing.records.states(sandbox_id)) == 6


async def test_fork_children_name_their_parent_and_a_fork_of_none_is_no_fork(
    wing: Wing,
) -> None:
    # A FakeVm's capture is no QEMU stream: the children fail (a fork that works, with FORKED
    # naming them, is lifecycle/test_events_vm.py's).
    parent = await wing.create()
    await wing.service.forks.fork(parent.sandbox_id, 2, child_ids=["childa", "childb"])

    events = await settled(wing)
    # No child lived: nothing happened to the parent; its hidden capture is no snapshot.
    assert events.types(parent.sandbox_id) == [CREATED, READY]
    for child in ("childa", "childb"):
        assert [(e.type, list(e.related_sandbox_ids)) for e in events.of(child)] == [
            (CREATED, [parent.sandbox_id]), (KILLED, [parent.sandbox_id])]


async def test_a_kill_with_a_cause_is_a_death_with_its_certificate(wing: Wing) -> None:
    running, paused = await wing.create(), await wing.create()
    await wing.service.pauses.pause(paused.sandbox_id, FILESYSTEM)
    await wing.settled()
    for sandbox in (running, paused):
        await wing.service.kills.kill(sandbox.sandbox_id, cause=c.DEATH_CAUSE_LEASE_EXPIRED,
                                detail="lease l-1 lapsed")

    events = await settled(wing)
    for sandbox in (running, paused):
        died = events.of(sandbox.sandbox_id)[-1]
        assert (died.type, died.cause, died.detail) == (
            DIED, c.DEATH_CAUSE_LEASE_EXPIRED, "lease l-1 lapsed")
        certificate = events.deaths[sandbox.sandbox_id]
        assert (certificate.cause, certificate.detail, certificate.event_id) == (
            c.DEATH_CAUSE_LEASE_EXPIRED, "lease l-1 lapsed", died.event_id)
        assert KILLED not in events.types(sandbox.sandbox_id)


async def test_an_owners_kill_leaves_no_certificate(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.kills.kill(sandbox.sandbox_id)
    events = await settled(wing)
    assert events.types(sandbox.sandbox_id)[-1] == KILLED
    assert events.deaths == {}


async def test_the_timeout_announces_timed_out_saying_what_it_did(wing: Wing) -> None:
    killed = await wing.create(timeout_seconds=1)
    paused = await wing.create(timeout_seconds=1, lifecycle=c.Lifecycle(
        auto_pause=True, auto_pause_mode=FILESYSTEM))
    await wing.service.kills.expire_due(time.time() + 5)

    events = await settled(wing)
    assert [(e.type, e.detail) for e in events.of(killed.sandbox_id)][-1] == (TIMED_OUT,
                                                                              "killed")
    assert [(e.type, e.detail) for e in events.of(paused.sandbox_id)][-1] == (TIMED_OUT,
                                                                              "paused")
    assert PAUSED not in events.types(paused.sandbox_id)
    assert KILLED not in events.types(killed.sandbox_id)


async def test_a_failed_event_write_never_fails_the_operation(wing: Wing) -> None:
    sandbox = await wing.create()
    events = await settled(wing)
    before = failed("killed")
    events.write_failures.append(Unavailable("etcd unavailable"))

    await wing.service.kills.kill(sandbox.sandbox_id)  # does not raise

    assert not wing.service.registry.has(sandbox.sandbox_id)
    assert KILLED not in events.types(sandbox.sandbox_id)
    assert failed("killed") == before + 1


async def test_a_death_etcd_refuses_is_written_once_it_answers(
    wing: Wing, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("aenv_nodeagent.sandbox.events.RETRY_FIRST_S", 0.01)
    sandbox = await wing.create()
    events = await settled(wing)
    events.write_failures += [Unavailable("etcd unavailable"), Internal("etcd error")]

    await wing.service.kills.kill(sandbox.sandbox_id, cause=c.DEATH_CAUSE_ADMIN_KILL,
                            detail="killed by an administrator")

    assert sandbox.sandbox_id not in events.deaths  # not yet: retried in the background
    await events.close()
    assert events.deaths[sandbox.sandbox_id].cause == c.DEATH_CAUSE_ADMIN_KILL
    assert events.types(sandbox.sandbox_id)[-1] == DIED


async def test_a_create_that_fails_ends_its_story_with_killed(wing: Wing) -> None:
    wing.driver.launch_failures.append(Internal("QEMU failed to start"))
    spec = wing.spec()
    with pytest.raises(Internal):
        await wing.service.creates.create(spec)
    events = (await settled(wing)).of(spec.sandbox_id)
    assert [e.type for e in events] == [CREATED, KILLED]
    assert events[1].detail == "its create failed: QEMU failed to start"


async def test_the_node_agents_stop_is_a_death_of_its_running_sandboxes(wing: Wing) -> None:
    sandbox = await wing.create()
    await wing.service.stop()
    events = recorded(wing)
    assert events.deaths[sandbox.sandbox_id].cause == c.DEATH_CAUSE_ADMIN_KILL
    assert events.deaths[sandbox.sandbox_id].detail == "its node agent stopped"


async def test_events_off_write_nothing_and_publish_the_record_alone() -> None:
    records = MemoryRecords()
    events = SandboxEvents.off(records, NODE_ID)
    record = c.SandboxRecord(sandbox_id="sbx-1", death=c.DeathCertificate(sandbox_id="sbx-1"))
    await events.announce(record, KILLED)
    assert await events.died(record, c.DEATH_CAUSE_GUEST_OOM, "oom") is None
    assert await events.operations(record, READY) == []
    await events.publish(record, READY, revived=True)
    stored = await records.get_sandbox("sbx-1")
    assert stored is not None and not stored.HasField("death")


async def test_recovery_certifies_what_did_not_survive_and_revives_what_is_back(
    tmp_path: Path,
) -> None:
    records = MemoryRecords()
    events = RecordingEvents(records, NODE_ID)
    gone = c.SandboxRecord(sandbox_id="sbx-gone", node_id=NODE_ID,
                           state=c.SANDBOX_STATE_RUNNING)
    lost = c.SandboxRecord(sandbox_id="sbx-back", node_id=NODE_ID, state=c.SANDBOX_STATE_LOST,
                           death=c.DeathCertificate(sandbox_id="sbx-back",
                                                    cause=c.DEATH_CAUSE_NODE_LOST))
    events.deaths["sbx-back"] = lost.death
    directory = tmp_path / "sandboxes" / "sbx-back"
    directory.mkdir(parents=True)
    Paused(lost, directory, Chain("base", [])).save()  # paused on this node's disk

    recovered = await recover(NODE_ID, tmp_path, FakeNetwork(),  # type: ignore[arg-type]
                              records, [gone, lost], events=events)

    assert recovered.paused == {"sbx-back"}
    certificate = events.deaths["sbx-gone"]
    assert (certificate.cause, certificate.detail) == (c.DEATH_CAUSE_VMM_CRASH,
                                                       NOT_SURVIVED_DETAIL)
    marked = await records.get_sandbox("sbx-gone")
    assert marked is not None and marked.state == c.SANDBOX_STATE_LOST
    assert marked.death.cause == c.DEATH_CAUSE_VMM_CRASH
    back = await records.get_sandbox("sbx-back")
    assert back is not None and back.state == c.SANDBOX_STATE_PAUSED
    assert not back.HasField("death") and events.withdrawn == ["sbx-back"]
    assert [(e.type, e.detail) for e in events.of("sbx-back")] == [(PAUSED, BACK)]
