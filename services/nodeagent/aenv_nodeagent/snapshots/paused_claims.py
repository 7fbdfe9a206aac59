"""Paused sandboxes that outlive their node.

What a pause kept (`sandbox.json`, the memory image and device state, the disk overlay and the
frozen layers under it) is pushed to snapstore as one manifest, in the background like a
snapshot. Once the push is complete the sandbox's record names the manifest (`paused_image`):
the scheduler's sweeper then keeps the sandbox PAUSED when its node is gone instead of reporting
it lost, and any live node may claim it. A claim checks the record (paused, stored, its node not
registered), pulls the manifest, points the qcow2 files at its own paths and takes the record over
with a compare-and-swap, so exactly one node wins. A resume or kill deletes the manifest. A node
that comes back after its paused sandboxes were claimed drops its copies at start
(restart/recovery.py).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.memory.images import (
    BASE_MEMORY,
    BASE_STATE,
    DELTA,
    DEVICE_STATE,
    MEMORY,
    delta_image,
)
from aenv_nodeagent.sandbox.model import PAUSED_MARKER
from aenv_nodeagent.sandbox.records import ClusterRecords
from aenv_nodeagent.snapshots.persistence import layer_file
from aenv_nodeagent.snapshots.store import LayerStore

_PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
_LOST = cluster_pb2.SANDBOX_STATE_LOST


def new_paused_image_id(sandbox_id: str) -> str:
    """A manifest name of its own per pause: a push cut short never passes for a later one."""
    return f"paused-{sandbox_id}-{secrets.token_hex(4)}"


def paused_files(
    directory: Path, layers: list[str], active: str, layer_store: LayerStore, *, memory: bool
) -> dict[str, Path]:
    """The manifest of a paused sandbox: its marker, its memory (unless only its disk was kept:
    a delta capture and its base, or its own memory image), its active overlay under its own
    name and the frozen layers below it."""
    files = {PAUSED_MARKER: directory / PAUSED_MARKER, active: directory / active}
    if memory:
        names = ((DELTA, BASE_MEMORY, BASE_STATE) if delta_image(directory) is not None
                 else (MEMORY, DEVICE_STATE))
        files |= {name: directory / name for name in names}
    return files | {layer_file(layer): layer_store.path(layer) for layer in layers}


async def orphaned(
    cluster: ClusterRecords, sandbox_id: str, node_id: str
) -> cluster_pb2.SandboxRecord:
    """The record of a sandbox `node_id` may claim: paused, stored in snapstore, and owned by a
    node that is gone. NotFound or Conflict (with the reason) otherwise."""
    record = await cluster.get_sandbox(sandbox_id)
    if record is None:
        raise NotFound(f"sandbox \"{sandbox_id}\" not found")
    _check_claimable(record, node_id)
    if await cluster.get_node(record.node_id) is not None:
        raise Conflict(f"sandbox \"{sandbox_id}\" is held by node \"{record.node_id}\", "
                       "which is alive")
    return record


def _check_claimable(record: cluster_pb2.SandboxRecord, node_id: str) -> None:
    sandbox_id = record.sandbox_id
    if record.node_id == node_id:
        raise Conflict(f"sandbox \"{sandbox_id}\" is already on this node")
    if record.state == _LOST:
        raise NotFound(f"sandbox \"{sandbox_id}\" was lost with its node")
    if record.state != _PAUSED:
        raise Conflict(f"sandbox \"{sandbox_id}\" is not paused")
    if not record.paused_image:
        raise Conflict(f"sandbox \"{sandbox_id}\" has no paused state in snapstore")


async def claim(
    cluster: ClusterRecords, seen: cluster_pb2.SandboxRecord, node_id: str
) -> cluster_pb2.SandboxRecord:
    """Make `node_id` the owner, provided the record is still what `orphaned` returned (another
    node may have claimed it, or its own node come back and resumed it, meanwhile)."""

    def mutate(record: cluster_pb2.SandboxRecord) -> None:
        if (record.node_id, record.state, record.paused_image) != (
            seen.node_id, seen.state, seen.paused_image
        ):
            raise Conflict(f"sandbox \"{seen.sandbox_id}\" changed hands meanwhile")
        record.node_id = node_id

    return await cluster.update_sandbox(seen.sandbox_id, mutate)
