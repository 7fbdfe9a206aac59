"""Retired marks in a real etcd do not pile up: each node that holds none of a retired template
acknowledges it, and the mark (with the acknowledgements) goes once every live node did — not
while one still holds the template —, or past its bound in any case; a mark made again meanwhile
stays."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore
from aenv_common.config import CommonSettings
from aenv_nodeagent.templates.retire import CLEARED, RetiredMarks

pytestmark = [pytest.mark.etcd]

DAY = 86400.0


@pytest.fixture
async def store(etcd_settings: CommonSettings) -> AsyncIterator[ClusterStore]:
    store = await ClusterStore.connect(etcd_settings)
    try:
        for node_id in ("node-a", "node-b"):
            await store.put_node(cluster_pb2.NodeRecord(node_id=node_id))
        yield store
    finally:
        for kind in (RETIRED_TEMPLATES, CLEARED):
            for record_id in await _kept(store, kind):
                await store.delete_record(kind, record_id)
        for node in await store.list_nodes():
            await store.delete_record("nodes", node.node_id)
        await store.close()


async def _mark(store: ClusterStore, template_id: str, made: float) -> None:
    mark = cluster_pb2.TemplateRecord(template_id=template_id)
    mark.created_at.FromSeconds(int(made))
    await store.put_record(RETIRED_TEMPLATES, template_id, mark)


async def _kept(store: ClusterStore, kind: str) -> set[str]:
    _, records = await store.snapshot(kind, cluster_pb2.TemplateRecord)
    return set(records)


async def test_a_mark_goes_once_every_live_node_holds_none(store: ClusterStore) -> None:
    now = 1_000 * DAY
    await _mark(store, "gone", now)
    a = RetiredMarks(store, "node-a", clock=lambda: now)
    b = RetiredMarks(store, "node-b", clock=lambda: now)

    assert await a.settle(held=set()) == []  # b has not said yet
    assert await _kept(store, CLEARED) == {"gone@node-a"}
    assert await b.settle(held={"gone"}) == []  # b still holds it (a sandbox stands on it)
    assert await a.ids() == {"gone"}
    assert await b.settle(held=set()) == ["gone"]  # dropped on b's pass: the mark goes
    assert await _kept(store, RETIRED_TEMPLATES) == set()
    assert await _kept(store, CLEARED) == set()

    # A node that left (no nodes/ record) is not waited for.
    await _mark(store, "after-b-left", now)
    await store.delete_record("nodes", "node-b")
    assert await a.settle(held=set()) == ["after-b-left"]


async def test_a_mark_goes_past_its_bound_and_an_unaged_or_undated_one_stays(
    store: ClusterStore,
) -> None:
    now = 1_000 * DAY
    await _mark(store, "old", now - 8 * DAY)
    await _mark(store, "recent", now - 1 * DAY)
    await store.put_record(RETIRED_TEMPLATES, "undated",
                           cluster_pb2.TemplateRecord(template_id="undated"))
    a = RetiredMarks(store, "node-a", clock=lambda: now)
    # node-a holds all three (node-b never reports): only the one past the bound goes.
    assert await a.settle(held={"old", "recent", "undated"}) == ["old"]
    assert await _kept(store, RETIRED_TEMPLATES) == {"recent", "undated"}
    assert await a.ids() == {"recent", "undated"}


async def test_a_mark_made_again_meanwhile_stays(store: ClusterStore) -> None:
    now = 1_000 * DAY
    await _mark(store, "again", now)
    a = RetiredMarks(store, "node-a", clock=lambda: now)
    await a.settle(held=set())

    b = RetiredMarks(store, "node-b", clock=lambda: now)
    original = store.delete_guarded

    async def marked_again(kind: str, record_id: str, mod_revision: int) -> bool:
        # The gateway marks it again between b's read and its prune.
        await _mark(store, "again", now)
        return await original(kind, record_id, mod_revision)

    store.delete_guarded = marked_again  # type: ignore[method-assign]
    try:
        assert await b.settle(held=set()) == []
    finally:
        store.delete_guarded = original  # type: ignore[method-assign]
    assert await _kept(store, RETIRED_TEMPLATES) == {"again"}  # the new mark stays
    assert await _kept(store, CLEARED) == set()  # acknowledged again on the next passes
    assert await a.settle(held=set()) == []
    assert await b.settle(held=set()) == ["again"]
