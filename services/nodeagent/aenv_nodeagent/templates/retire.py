"""Dropping the local copies of templates the catalog no longer uses: the gateway that deletes
the last catalog build using a node-side template marks it retired in etcd
(`retired-templates/<id>`, and removes its `templates/<id>` record); a template built or pulled
here (saved.py) that is marked so loses its registration, saved inputs, captured snapshots, warm
VMs and overlays. Its rootfs stays: base disks are kept by digest and may be shared by other
templates (and by other nodes of this host).

Never dropped while a sandbox (running, paused, being made) or a snapshot of this node stands on
the template: it goes on a later pass, once they are gone. A node that was down when a template
was retired drops it on its first pass after it starts. Only a mark counts, never a missing
record: a node sharing its folders with another cluster's node sees that one's templates without
records.

The marks do not pile up (RetiredMarks): each node that holds none of a retired template says so
(`retired-templates-cleared/<id>@<node>`), and a mark every live node cleared goes with those
acknowledgements — or, past `MARK_BOUND_S` after it was made, in any case: a node away that long
(no `nodes/` record, so not waited for) keeps its copy, bounded by its caches.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Awaitable, Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore
from aenv_nodeagent.templates.bounds import run_every
from aenv_nodeagent.templates.cache import Forget, InUse
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.store import TemplateStore

log = logging.getLogger(__name__)

Retired = Callable[[], Awaitable[set[str]]]
CLEARED = "retired-templates-cleared"
MARK_BOUND_S = 7 * 86400.0


async def retired_ids(store: ClusterStore) -> set[str]:
    records = await store.list_records(RETIRED_TEMPLATES, cluster_pb2.TemplateRecord)
    return {record.template_id for record in records}


def _cleared_id(template_id: str, node_id: str) -> str:
    return f"{template_id}@{node_id}"


class RetiredMarks:
    """The retired marks in etcd, acknowledged by each node that holds none of a template and
    pruned once every live node did, or past `bound_s`."""

    def __init__(
        self, store: ClusterStore, node_id: str, *, bound_s: float = MARK_BOUND_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._node_id = node_id
        self._bound_s = bound_s
        self._clock = clock

    async def ids(self) -> set[str]:
        return await retired_ids(self._store)

    async def settle(self, held: set[str]) -> list[str]:
        """Acknowledges the marks of templates not in `held` (this node's), then prunes the
        marks every live node acknowledged or past the bound; returns the pruned ids."""
        _, marks = await self._store.snapshot(RETIRED_TEMPLATES, cluster_pb2.TemplateRecord)
        _, acks = await self._store.snapshot(CLEARED, cluster_pb2.TemplateRecord)
        live = {node.node_id for node in await self._store.list_nodes()}
        pruned = []
        for template_id, mark in marks.items():
            cleared = {ack_id.removeprefix(template_id + "@") for ack_id, ack in acks.items()
                       if ack.record.template_id == template_id}
            if template_id not in held and self._node_id not in cleared:
                await self._store.put_record(CLEARED, _cleared_id(template_id, self._node_id),
                                             cluster_pb2.TemplateRecord(template_id=template_id))
                cleared.add(self._node_id)
            made = mark.record.created_at.seconds  # 0: a mark older than its time: never aged
            aged = made > 0 and self._clock() - made > self._bound_s
            if (live <= cleared or aged) and await self._prune(
                    template_id, mark.mod_revision, cleared):
                pruned.append(template_id)
        return pruned

    async def _prune(self, template_id: str, revision: int, cleared: set[str]) -> bool:
        # The acknowledgements first: a stop in between leaves a mark the nodes acknowledge
        # again, never acknowledgements without a mark. The mark only as read: a gateway may
        # have marked it again meanwhile.
        for node_id in cleared:
            await self._store.delete_record(CLEARED, _cleared_id(template_id, node_id))
        if not await self._store.delete_guarded(RETIRED_TEMPLATES, template_id, revision):
            return False
        log.info("retired mark pruned: no node holds the template",
                 extra={"template": template_id})
        return True


class RetiredTemplates:
    def __init__(
        self,
        store: TemplateStore,
        saved: SavedTemplates,
        retired: Retired,
        in_use: InUse,
        forget: Forget,
        marks: RetiredMarks | None = None,
    ) -> None:
        self._store = store
        self._saved = saved
        self._retired = retired
        self._in_use = in_use
        self._forget = forget  # the warm pool's VMs and overlays of a template
        self._marks = marks  # acknowledged and pruned after each pass

    async def sweep(self) -> list[str]:
        """Drops every saved template marked retired that nothing stands on; returns their
        ids."""
        retired = await self._retired()
        kept = self._in_use()
        dropped = []
        for template_id in self._saved.ids():
            if template_id in retired and template_id not in kept:
                await self._drop(template_id)
                dropped.append(template_id)
        if self._marks is not None:
            await self._marks.settle(set(self._saved.ids()))
        return dropped

    async def _drop(self, template_id: str) -> None:
        for snap in self._store.on_disk():
            if snap.template_id == template_id:
                await self._forget(template_id, snap.disk)
                self._store.drop_captured(snap)
        self._store.unregister(template_id)
        self._saved.remove(template_id)
        shutil.rmtree(self._store.root / template_id, ignore_errors=True)
        log.info("template dropped: the catalog no longer uses it",
                 extra={"template": template_id})

    async def run(self, interval_s: float) -> None:
        # A pass that cannot read the marks (etcd away) drops nothing; the next tries again.
        await run_every(interval_s, "retired templates sweep", self.sweep)
