"""A sandbox's whole life with real guests, read back from a real etcd: create, set timeout,
pause, resume, snapshot, fork into 2, kill, and a sandbox whose timeout kills it. Records and
events share the one etcd, as in a node agent (READY and the others that change the record are
in the record's own transaction)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.cluster import ClusterStore
from aenv_common.events import EventLog
from aenv_common.events.log import SANDBOX_EVENTS
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_testing.records import MemoryRecords

from .conftest import Node, node_parts, spec

pytestmark = [pytest.mark.vm, pytest.mark.netns, pytest.mark.etcd]

NODE_ID = "test-node"
T = c.SandboxEventType
CREATED, READY = c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_READY
PAUSED, RESUMED = c.SANDBOX_EVENT_TYPE_PAUSED, c.SANDBOX_EVENT_TYPE_RESUMED
SNAPSHOTTED, FORKED = c.SANDBOX_EVENT_TYPE_SNAPSHOTTED, c.SANDBOX_EVENT_TYPE_FORKED
KILLED, TIMED_OUT = c.SANDBOX_EVENT_TYPE_KILLED, c.SANDBOX_EVENT_TYPE_TIMED_OUT
UPDATED = c.SANDBOX_EVENT_TYPE_UPDATED
METADATA = {"rollout_id": "r-7", "step": "3"}


@contextlib.asynccontextmanager
async def _node(store: ClusterStore) -> AsyncIterator[tuple[Node, EventLog]]:
    log = EventLog(store, retention_s=600)

    def events(records: MemoryRecords) -> SandboxEvents:
        return SandboxEvents(records, NODE_ID, log)

    # The store stands in for the records as it does in a node agent.
    async with node_parts(records=cast(MemoryRecords, store), events=events) as node:
        yield node, log


async def _story(log: EventLog, sandbox_id: str) -> list[c.SandboxEvent]:
    """The sandbox's events as a reader gets them (etcd's key order), checked to be in id
    order and to carry the sandbox's identity."""
    events = await log.events(SANDBOX_EVENTS, sandbox_id)
    ids = [e.event_id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for event in events:
        assert (event.sandbox_id, event.node_id, event.template_id) == (
            sandbox_id, NODE_ID, BASE_TEMPLATE)
        assert dict(event.metadata) == METADATA
        assert event.owner_key_id == "key-1" and event.time.ToNanoseconds() > 0
    return events


async def test_a_sandboxs_whole_life_is_in_etcd(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        lc = node.sandboxes
        source = spec(metadata=METADATA, owner_key_id="key-1")
        sandbox_id = source.sandbox_id
        await lc.creates.create(source)
        await lc.changes.set_timeout(sandbox_id, 900)
        await lc.pauses.pause(sandbox_id)
        await node.settled()
        await lc.pauses.resume(sandbox_id)
        meta = await lc.snapshots.create(sandbox_id, "checkpoint")
        results = await lc.forks.fork(sandbox_id, 2)
        children = sorted(r.sandbox_id for r in results if isinstance(r, Sandbox))
        assert len(children) == 2, results
        await lc.kills.kill(sandbox_id)
        await lc.context.events.close()  # what was written in the background (CREATED) is in

        story = await _story(log, sandbox_id)
        assert [(e.type, e.detail) for e in story] == [
            (CREATED, ""), (READY, ""), (UPDATED, "timeout 900 s"), (PAUSED, ""),
            (RESUMED, ""), (SNAPSHOTTED, f"snapshot {meta.snapshot_id}"), (FORKED, ""),
            (KILLED, "")]
        assert sorted(story[6].related_sandbox_ids) == children
        assert await log.death(sandbox_id) is None  # its owner's kill: no death
        for child in children:
            events = await _story(log, child)
            assert [(e.type, list(e.related_sandbox_ids)) for e in events] == [
                (CREATED, [sandbox_id]), (READY, [sandbox_id])]
            record = await cluster_store.get_sandbox(child)
            assert record is not None and record.state == c.SANDBOX_STATE_RUNNING
        assert await cluster_store.get_sandbox(sandbox_id) is None


async def test_a_sandbox_whose_timeout_comes_is_timed_out(cluster_store: ClusterStore) -> None:
    async with _node(cluster_store) as (node, log):
        lc = node.sandboxes
        source = spec(metadata=METADATA, owner_key_id="key-1", timeout_seconds=2)
        await lc.creates.create(source)
        assert await lc.kills.expire_due(time.time() + 5) == [source.sandbox_id]
        await lc.context.events.close()

        story = await _story(log, source.sandbox_id)
        assert [(e.type, e.detail) for e in story] == [
            (CREATED, ""), (READY, ""), (TIMED_OUT, "killed")]
        assert await cluster_store.get_sandbox(source.sandbox_id) is None
        assert await log.death(source.sandbox_id) is None
