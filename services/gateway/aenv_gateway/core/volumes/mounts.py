"""The volume mounts a sandbox gets (docs/volumes.md): each is a `VolumeMount` on the spec the
node agent receives, with a ticket snapstore minted for that sandbox id alone.

- Create: the mounts asked for (by volume id or name, the caller's volumes only), plus, for a
  sandbox made from a snapshot, the snapshot's own mounts (its guest's kernel mounted them, so
  each keeps its `seen_as`), with fresh tickets. Paths are checked together (names.py: absolute,
  normalized, not `/`, `/proc`, `/sys`, `/dev`; no two on one path, none inside another).
- Fork: every child gets the parent's mounts (`seen_as` kept: the child's kernel is a copy of
  the parent's). SHARED: the same volumes. COPY_ON_WRITE: each read-write mount is a clone made
  for that child (an ephemeral volume that goes with it: sweep.py), read-only ones stay shared.
  A failed fork removes every clone it made; a child that failed to start has its own removed.

Tickets are secrets: they travel only on specs to node agents and are cleared from every record
the APIs answer (core/redaction.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, InvalidArgument, NotFound
from aenv_gateway.cluster.clients import ForkOutcome
from aenv_gateway.core.volumes.names import check_disjoint, check_mount_path, clone_name
from aenv_gateway.core.volumes.operations import Volumes
from aenv_gateway.core.volumes.records import VolumeRecord

log = logging.getLogger(__name__)

VolumeMount = cluster_pb2.VolumeMount
ForkSender = Callable[[nodeagent_pb2.ForkSandboxRequest], Awaitable[list[ForkOutcome]]]


@dataclass(frozen=True)
class MountRequest:
    path: str
    # A volume id (`vol-…`) or name of the caller's.
    volume: str
    read_only: bool = False


@dataclass
class ForkMounts:
    """Each child's mounts (empty: the parent has none) and the clones made for each child."""

    children: list[nodeagent_pb2.ChildVolumeMounts] = field(default_factory=list)
    clones: dict[str, list[VolumeRecord]] = field(default_factory=dict)

    @property
    def volume_ids(self) -> list[str]:
        return [m.volume_id for child in self.children for m in child.mounts]


class VolumeMounts:
    def __init__(self, volumes: Volumes) -> None:
        self.volumes = volumes

    def check_paths(self, requests: Sequence[MountRequest]) -> None:
        """What a create can check before anything is placed.

        :raise InvalidArgument: a bad path, or two that clash."""
        check_disjoint([check_mount_path(r.path) for r in requests])

    async def for_create(
        self, sandbox_id: str, owner: str, requests: Sequence[MountRequest],
        inherited: Sequence[VolumeMount] = (),
    ) -> list[VolumeMount]:
        """The mounts of a new sandbox, each with its ticket.

        :raise InvalidArgument: bad or clashing paths. :raise NotFound: a volume the caller
            has no such volume (or a snapshot's volume is gone).
        """
        check_disjoint([check_mount_path(r.path) for r in requests]
                       + [m.path for m in inherited])
        if not requests and not inherited:
            return []
        if not self.volumes.available:
            # Refused, not Unavailable: no retry of this create could ever mount them.
            raise InvalidArgument("volumeMounts: this platform has no volume server (the "
                                  "gateway has no snapstore_address)")
        client = self.volumes.client
        mounts: list[VolumeMount] = []
        for old in inherited:
            record = await self.volumes.record(old.volume_id)
            if record is None or record.owner_key_id != owner:
                raise NotFound(f"volume '{old.name}' mounted at {old.path} by the snapshot no "
                               "longer exists")
            seen_as = old.seen_as or old.volume_id
            ticket = await client.grant(sandbox_id, record.volume_id, seen_as, old.read_only)
            mounts.append(VolumeMount(path=old.path, volume_id=record.volume_id,
                                      name=record.name, read_only=old.read_only, ticket=ticket,
                                      seen_as=seen_as))
        for asked in requests:
            record = await self.volumes.find(owner, asked.volume)
            ticket = await client.grant(sandbox_id, record.volume_id, record.volume_id,
                                        asked.read_only)
            mounts.append(VolumeMount(path=asked.path, volume_id=record.volume_id,
                                      name=record.name, read_only=asked.read_only, ticket=ticket,
                                      seen_as=record.volume_id))
        return mounts

    async def for_fork(
        self, parent: cluster_pb2.SandboxRecord, child_ids: Sequence[str], copy_on_write: bool
    ) -> ForkMounts:
        """Each child's mounts; on any failure the clones made so far are removed."""
        made = ForkMounts()
        if not parent.volume_mounts:
            return made
        # Each cloned volume's quota, read once for all the children.
        quotas = {m.volume_id: await self._quota(m.volume_id) for m in parent.volume_mounts
                  if copy_on_write and not m.read_only}
        outcomes = await asyncio.gather(
            *(self._child(parent, child, quotas, made) for child in child_ids),
            return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            await asyncio.shield(self.drop(made, made.clones))
            raise failure
        made.children = [o for o in outcomes if isinstance(o, nodeagent_pb2.ChildVolumeMounts)]
        return made

    async def _quota(self, volume_id: str) -> int:
        source = await self.volumes.record(volume_id)
        return source.quota_bytes if source is not None else 0

    async def _child(
        self, parent: cluster_pb2.SandboxRecord, child_id: str, quotas: dict[str, int],
        made: ForkMounts,
    ) -> nodeagent_pb2.ChildVolumeMounts:
        """`quotas`: the volumes to clone for the child (copy-on-write), with their quotas."""
        client = self.volumes.client
        mounts: list[VolumeMount] = []
        for mount in parent.volume_mounts:
            volume_id, name = mount.volume_id, mount.name
            if mount.volume_id in quotas:
                clone = await self.volumes.create(
                    parent.owner_key_id, clone_name(name, child_id), quotas[mount.volume_id],
                    ephemeral_for=child_id, cloned_from=mount.volume_id)
                made.clones.setdefault(child_id, []).append(clone)
                volume_id, name = clone.volume_id, clone.name
            seen_as = mount.seen_as or mount.volume_id
            ticket = await client.grant(child_id, volume_id, seen_as, mount.read_only)
            mounts.append(VolumeMount(path=mount.path, volume_id=volume_id, name=name,
                                      read_only=mount.read_only, ticket=ticket, seen_as=seen_as))
        return nodeagent_pb2.ChildVolumeMounts(mounts=mounts)

    async def drop(self, made: ForkMounts, child_ids: Iterable[str]) -> None:
        """Removes the clones made for `child_ids` (children that never started); a clone
        that cannot be removed now is left to the sweep (its sandbox does not exist)."""
        for child_id in list(child_ids):
            for clone in made.clones.pop(child_id, []):
                try:
                    await self.volumes.remove(clone)
                except AenvError as err:
                    log.warning("clone of a failed fork child left to the sweep",
                                extra={"volume_id": clone.volume_id, "error": err.message})

    async def for_spec(
        self, spec: cluster_pb2.SandboxSpec, requests: Sequence[MountRequest]
    ) -> None:
        """Puts a new sandbox's mounts on its spec: those asked for, and those of the snapshot
        it is created from (`spec.template_id` naming one)."""
        snapshot = self.volumes.snapshot(spec.template_id)
        inherited = list(snapshot.volume_mounts) if snapshot is not None else []
        spec.volume_mounts.extend(
            await self.for_create(spec.sandbox_id, spec.owner_key_id, requests, inherited))

    async def forked(
        self, parent: cluster_pb2.SandboxRecord, request: nodeagent_pb2.ForkSandboxRequest,
        copy_on_write: bool, send: ForkSender,
    ) -> list[ForkOutcome]:
        """`send`s the fork with its children's mounts (`child_volume_mounts`) when the parent
        has any; the clones of children that did not start are removed."""
        made = await self.for_fork(parent, request.child_ids, copy_on_write)
        request.child_volume_mounts.extend(made.children)
        with self.volumes.mounting(made.volume_ids):
            try:
                results = await send(request)
            except BaseException:
                # Children the node made before the call broke keep theirs (the sweep takes
                # them with their sandbox).
                started = self.volumes.existing(request.child_ids)
                await asyncio.shield(
                    self.drop(made, [c for c in request.child_ids if c not in started]))
                raise
        failed = [child for child, result in zip(request.child_ids, results, strict=False)
                  if not isinstance(result, cluster_pb2.SandboxRecord)]
        await self.drop(made, failed)
        return results
