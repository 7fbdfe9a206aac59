"""The scheduler's sweep against a real etcd: a sandbox lost with its node gets its death on its
record, a certificate and a LOST event; one whose certificate etcd did not take gets it on the
next pass."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common import errors
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.lost import LostSandboxes
from aenv_common.events import EventLog, death_message
from aenv_common.events.log import SANDBOX_EVENTS

pytestmark = pytest.mark.etcd

DETAIL = "lost with its node gone-1, which stopped answering"


def sandbox(sandbox_id: str, node_id: str) -> c.SandboxRecord:
    return c.SandboxRecord(
        sandbox_id=sandbox_id, node_id=node_id, template_id="build-7",
        catalog_template_id="tpl-1", state=c.SANDBOX_STATE_RUNNING, owner_key_id="key-1",
        metadata={"rollout_id": "r1"}, lease_id="lease-1")


async def test_a_sandbox_lost_with_its_node_is_certified(cluster_store: ClusterStore) -> None:
    log = EventLog(cluster_store, retention_s=600)
    await cluster_store.put_sandbox(sandbox("alive", "n1"))
    await cluster_store.put_sandbox(sandbox("orphan", "gone-1"))

    assert await LostSandboxes(cluster_store, log).sweep({"n1"}) == ["orphan"]

    record = await cluster_store.get_sandbox("orphan")
    assert record is not None and record.state == c.SANDBOX_STATE_LOST
    assert (record.death.cause, record.death.detail) == (c.DEATH_CAUSE_NODE_LOST, DETAIL)
    certificate = await log.death("orphan")
    assert certificate == record.death
    assert death_message(certificate) == f"sandbox orphan died: node_lost ({DETAIL})"
    (event,) = await log.events(SANDBOX_EVENTS, "orphan")
    assert (event.type, event.cause, event.detail, event.event_id) == (
        c.SANDBOX_EVENT_TYPE_LOST, c.DEATH_CAUSE_NODE_LOST, DETAIL, certificate.event_id)
    assert (event.node_id, event.template_id, event.owner_key_id, event.lease_id) == (
        "gone-1", "tpl-1", "key-1", "lease-1")
    assert dict(event.metadata) == {"rollout_id": "r1"}
    assert await log.death("alive") is None
    assert await log.events(SANDBOX_EVENTS, "alive") == []
    # A second pass finds nothing new to say.
    assert await LostSandboxes(cluster_store, log).sweep({"n1"}) == []
    assert len(await log.events(SANDBOX_EVENTS, "orphan")) == 1


class RefusingOnce(EventLog):
    """An event log whose first certificate etcd does not take."""

    refused = 0

    async def certify(
        self, certificate: c.DeathCertificate, event: c.SandboxEvent, *,
        replacing: tuple[bytes, int] | None = None,
    ) -> bool:
        if not self.refused:
            self.refused += 1
            raise errors.Unavailable("etcd unavailable during certify")
        return await super().certify(certificate, event, replacing=replacing)


async def test_a_certificate_not_taken_is_written_on_the_next_pass(
    cluster_store: ClusterStore,
) -> None:
    log = RefusingOnce(cluster_store, retention_s=600)
    sweep = LostSandboxes(cluster_store, log)
    await cluster_store.put_sandbox(sandbox("orphan", "gone-1"))

    assert await sweep.sweep({"n1"}) == ["orphan"]
    assert await log.death("orphan") is None  # refused: kept for the next pass

    assert await sweep.sweep({"n1"}) == []
    certificate = await log.death("orphan")
    record = await cluster_store.get_sandbox("orphan")
    assert certificate is not None and record is not None and certificate == record.death


async def test_without_an_event_log_only_the_record_changes(cluster_store: ClusterStore) -> None:
    await cluster_store.put_sandbox(sandbox("orphan", "gone-1"))
    assert await LostSandboxes(cluster_store).sweep({"n1"}) == ["orphan"]
    record = await cluster_store.get_sandbox("orphan")
    assert record is not None and record.death.cause == c.DEATH_CAUSE_NODE_LOST
    assert await EventLog(cluster_store).death("orphan") is None
