"""Leader-only work: sandboxes of nodes whose lease expired are marked lost."""

from __future__ import annotations

import asyncio
import logging

from aenv_common import errors
from aenv_common.cluster import ClusterStore, mark_lost_sandboxes

log = logging.getLogger(__name__)


async def sweep_lost_sandboxes(store: ClusterStore, interval_seconds: float) -> None:
    while True:
        try:
            # Live nodes from etcd itself, not a cache that may lag behind a resync.
            live = {node.node_id for node in await store.list_nodes()}
            lost = await mark_lost_sandboxes(store, live)
            if lost:
                log.warning("marked sandboxes lost", extra={"count": len(lost)})
        except errors.AenvError as err:
            log.warning("lost-sandbox sweep failed", extra={"error": err.message})
        await asyncio.sleep(interval_seconds)
