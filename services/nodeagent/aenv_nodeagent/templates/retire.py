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
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Awaitable, Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore
from aenv_nodeagent.templates.bounds import run_every
from aenv_nodeagent.templates.cache import Forget, InUse
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.store import TemplateStore

log = logging.getLogger(__name__)

Retired = Callable[[], Awaitable[set[str]]]


async def retired_ids(store: ClusterStore) -> set[str]:
    records = await store.list_records(RETIRED_TEMPLATES, cluster_pb2.TemplateRecord)
    return {record.template_id for record in records}


class RetiredTemplates:
    def __init__(
        self,
        store: TemplateStore,
        saved: SavedTemplates,
        retired: Retired,
        in_use: InUse,
        forget: Forget,
    ) -> None:
        self._store = store
        self._saved = saved
        self._retired = retired
        self._in_use = in_use
        self._forget = forget  # the warm pool's VMs and overlays of a template

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
