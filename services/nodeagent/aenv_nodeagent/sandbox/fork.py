"""Fork and reset: many sandboxes branched from one moment of a running one, and a running
sandbox rewound to a snapshot in place.

A fork is one hidden capture of the parent, which then continues, and `count` children restored from
it by the one restore pipeline, each with an id, token and network of its own; the capture goes when
they run (they hold its memory image and disk layer). Children are restored at most one per CPU the
agent may run on at a time, node-wide: guests woken all at once slow each other's wake-up, so the
last child of a big fork is ready sooner in waves. A child that fails gets an error entry; the
others live. A reset quits the sandbox's VM and restores the snapshot into its own directory and
slot: same id, token and address.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Sequence

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Internal, InvalidArgument
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_common.limits import MAX_FORK_CHILDREN
from aenv_nodeagent.capacity.host import usable_cpus
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.create import Creates
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.pause import discard_memory
from aenv_nodeagent.sandbox.restore import Restorer
from aenv_nodeagent.sandbox.snapshot import Snapshots
from aenv_nodeagent.snapshots.store import SnapshotMeta

log = logging.getLogger(__name__)

FORKED = cluster_pb2.SANDBOX_EVENT_TYPE_FORKED
UPDATED = cluster_pb2.SANDBOX_EVENT_TYPE_UPDATED
KILLED = cluster_pb2.SANDBOX_EVENT_TYPE_KILLED


class Forks:
    """Fork and reset of running sandboxes."""

    def __init__(
        self, wing: WingContext, snapshots: Snapshots, creates: Creates, restorer: Restorer
    ) -> None:
        self._events = wing.events
        self._registry = wing.registry
        self._snapshots = snapshots
        self._creates = creates
        self._restorer = restorer
        self._sources = wing.sources
        self._layers = wing.disk
        self._network = wing.network
        self._records = wing.records
        self._cut_traffic = wing.cut_traffic
        self._restoring = asyncio.Semaphore(
            wing.settings.fork_restores_at_once or usable_cpus())

    async def fork(
        self, sandbox_id: str, count: int, timeout_s: int = 0,
        child_ids: Sequence[str] = (), child_tokens: Sequence[str] = (),
        child_mounts: Sequence[Sequence[cluster_pb2.VolumeMount]] = (),
    ) -> list[Sandbox | AenvError]:
        """`count` children of the sandbox as it is now, one outcome per child: the child, or
        the typed error its restore failed with (the others live). Child i mounts
        `child_mounts[i]` (its copy-on-write clones, each with its own tickets), or with none
        given its parent's volumes, shared.

        :raise InvalidArgument: a bad count, or ids/tokens/mounts not one per child.
        :raise NotFound, Conflict: no such running sandbox, or it is busy.
        :raise AenvError: the parent's capture failed (no child was made).
        """
        ids, tokens = _child_identities(count, child_ids, child_tokens)
        parent = self._registry.get(sandbox_id).record
        mounts = _child_mounts(count, parent, child_mounts)
        # Timed as a whole (its capture and its children are operations of their own too).
        with PhaseTimer.operation("sandbox.fork", parent) as timer:
            snapshot = await timer.timed(
                "capture", self._snapshots.create(sandbox_id, hidden=True))
            try:
                outcomes = await timer.timed("children", asyncio.gather(
                    *(self._child(snapshot, _child_spec(parent, cid, token, timeout_s, volumes),
                                  sandbox_id)
                      for cid, token, volumes in zip(ids, tokens, mounts, strict=True)),
                    return_exceptions=True,
                ))
            finally:
                await self._snapshots.delete(snapshot.snapshot_id)
            children = [child.sandbox_id for child in outcomes if isinstance(child, Sandbox)]
            if children:
                await self._events.announce(parent, FORKED, related=children)
        return [_child_outcome(outcome) for outcome in outcomes]

    async def _child(
        self, snapshot: SnapshotMeta, spec: cluster_pb2.SandboxSpec, parent_id: str
    ) -> Sandbox:
        async with self._restoring:
            return await self._creates.from_snapshot(snapshot, spec, parent=(parent_id,))

    async def reset(self, sandbox_id: str, snapshot_id: str) -> cluster_pb2.SandboxRecord:
        """Rewind a running sandbox to one of the snapshots in place: same id, token, network.

        :raise NotFound: no such running sandbox or snapshot.
        :raise Conflict: busy, or a snapshot this node cannot restore.
        :raise AenvError: the restore failed; the sandbox is gone (its old state was discarded).
        """
        sandbox = self._registry.get(sandbox_id)
        snapshot = self._sources.check(self._snapshots.store.get(snapshot_id))
        await self._layers.compacted(sandbox_id)
        with self._registry.exclusive(sandbox_id), PhaseTimer.operation(
                "sandbox.reset", sandbox.record) as timer:
            try:
                await self._cut_traffic(sandbox_id)
                await timer.timed("quit", sandbox.vm.shutdown())
                for old in sandbox.directory.glob("*.qcow2"):
                    old.unlink()  # this sandbox's overlays; frozen layers live on in layers/
                discard_memory(sandbox.directory)  # what it ran on after a resume
                reset = await self._restorer.restore(
                    self._sources.for_reset(sandbox, snapshot), timer, event=UPDATED,
                    detail=f"reset to snapshot {snapshot_id}")
                # What reached the old VM while it quit waits on nothing.
                await self._cut_traffic(sandbox_id)
            except BaseException as err:
                await self._discard(sandbox)
                reason = err.message if isinstance(err, AenvError) else type(err).__name__
                await self._events.announce(
                    sandbox, KILLED, detail=f"its reset to snapshot {snapshot_id} failed: {reason}")
                raise
        log.info("sandbox reset", extra={"sandbox_id": sandbox_id, "snapshot_id": snapshot_id,
                                         **timer.fields()})
        return reset.record

    async def _discard(self, sandbox: Sandbox) -> None:
        """Remove a sandbox whose VM is already gone (a reset that failed half-way)."""
        self._registry.remove_running(sandbox.sandbox_id)
        await self._cut_traffic(sandbox.sandbox_id)
        await self._network.destroy_slot(sandbox.slot)
        shutil.rmtree(sandbox.directory, ignore_errors=True)
        await self._records.delete_sandbox(sandbox.sandbox_id)
        self._layers.collect()


def _child_identities(
    count: int, ids: Sequence[str], tokens: Sequence[str]
) -> tuple[list[str], list[str]]:
    if not 1 <= count <= MAX_FORK_CHILDREN:
        raise InvalidArgument(f"count must be between 1 and {MAX_FORK_CHILDREN}")
    if (ids and len(ids) != count) or (tokens and len(tokens) != count):
        raise InvalidArgument("child_ids and child_tokens must have one entry per child")
    return (list(ids) or [new_sandbox_id() for _ in range(count)],
            list(tokens) or [new_secret() for _ in range(count)])


def _child_mounts(
    count: int, parent: cluster_pb2.SandboxRecord,
    given: Sequence[Sequence[cluster_pb2.VolumeMount]],
) -> list[Sequence[cluster_pb2.VolumeMount]]:
    """Each child's volume mounts: its own when given (one list per child), else the parent's.
    A child's guest has its parent's mounts in memory, at the parent's paths: its own list must
    mount at exactly those (envd skips mounted paths, so another path would stay unmounted).

    :raise InvalidArgument: not one list per child, or paths other than the parent's.
    """
    if not given:
        return [parent.volume_mounts] * count
    if len(given) != count:
        raise InvalidArgument("child_volume_mounts must have one entry per child")
    paths = sorted(m.path for m in parent.volume_mounts)
    if any(sorted(m.path for m in child) != paths for child in given):
        raise InvalidArgument("a child's volume mounts must be at its parent's mount paths")
    return list(given)


def _child_spec(
    parent: cluster_pb2.SandboxRecord, sandbox_id: str, token: str, timeout_s: int,
    volume_mounts: Sequence[cluster_pb2.VolumeMount] = (),
) -> cluster_pb2.SandboxSpec:
    return cluster_pb2.SandboxSpec(
        sandbox_id=sandbox_id, template_id=parent.template_id, envd_access_token=token,
        env_vars=parent.env_vars, metadata=parent.metadata, timeout_seconds=timeout_s,
        network=parent.network, lifecycle=parent.lifecycle, resources=parent.resources,
        # A child is a sandbox of its own: private app ports get a token of their own too.
        traffic_access_token=new_secret() if parent.network.private_traffic else "",
        # Its rules are the parent's, whose placeholders name the parent owner's secrets.
        owner_key_id=parent.owner_key_id,
        # Under its parent's experiment lease: ended with it when it lapses.
        lease_id=parent.lease_id,
        # In its parent's rollout trace: its later operations are too.
        trace_parent=parent.trace_parent,
        volume_mounts=volume_mounts,
    )


def _child_outcome(outcome: Sandbox | BaseException) -> Sandbox | AenvError:
    """A child, or the typed error it failed with; an unexpected one is logged and told as an
    internal error. A cancellation ends the fork."""
    if isinstance(outcome, Sandbox | AenvError):
        return outcome
    if not isinstance(outcome, Exception):
        raise outcome
    log.error("fork child failed", exc_info=outcome)
    return Internal("internal error")
