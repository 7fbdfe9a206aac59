"""Leader-only work: sandboxes of nodes whose lease expired are marked lost, each with its death
certificate (cause NODE_LOST) and a LOST event."""

from __future__ import annotations

import asyncio
import logging

from aenv_common import errors
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.lost import LostSandboxes
from aenv_common.events import EventLog

log = logging.getLogger(__name__)


async def sweep_lost_sandboxes(
    store: ClusterStore, interval_seconds: float, events: EventLog | None = None
) -> None:
    """Until cancelled (the term as leader ends). `events`: None records no certificates."""
    sweep = LostSandboxes(store, events)
    while True:
        try:
            # Live nodes from etcd itself, not a cache that may lag behind a resync.
            live = {node.node_id for node in await store.list_nodes()}
            lost = await sweep.sweep(live)
            if lost:
                log.warning("marked sandboxes lost", extra={"count": len(lost)})
        except errors.AenvError as err:
            log.warning("lost-sandbox sweep failed", extra={"error": err.message})
        await asyncio.sleep(interval_seconds)
