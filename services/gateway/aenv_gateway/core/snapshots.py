"""Snapshot operations, shared by the REST and gRPC edges.

A snapshot's files live on the node that captured it; that node agent publishes its record in
etcd and is the one asked to delete it. Creating a sandbox from a snapshot is a plain create with
the snapshot id as template (the scheduler places it on the holding node).

The native gRPC API names snapshots by their ids (`snap-…`); the REST API as E2B does, by
snapshot templates (templates/snapshot_catalog.py): `aenv/name:tag`, or `snap-…:default` for an
unnamed one. Ids work on both."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, NotFound, Unavailable
from aenv_gateway.cluster.clients import NodeAgentClients
from aenv_gateway.cluster.directory import SandboxDirectory
from aenv_gateway.core.paging import OrderKey, paginate
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.core.templates.names import DEFAULT_TAG
from aenv_gateway.core.templates.snapshot_catalog import (
    SnapshotCatalog,
    SnapshotInfo,
    template_info,
    unnamed_info,
)
from aenv_gateway.core.templates.snapshot_names import (
    SNAPSHOT_ID_PREFIX,
    SnapshotName,
    lookup_name,
    parse_snapshot_name,
)

log = logging.getLogger(__name__)
Item = TypeVar("Item")


@dataclass(frozen=True)
class SnapshotQuery:
    sandbox_id: str | None = None
    name: str | None = None
    limit: int | None = None
    cursor: str | None = None


@dataclass(frozen=True)
class SnapshotPage(Generic[Item]):
    """Snapshot records (the native API) or E2B's SnapshotInfo (the REST API)."""

    items: list[Item]
    next_cursor: str | None


@dataclass(frozen=True)
class Listed:
    """One entry of E2B's snapshot list: a snapshot template, or an unnamed snapshot."""

    key: OrderKey
    info: SnapshotInfo
    sandbox_id: str


class SnapshotService:
    def __init__(
        self, sandboxes: SandboxService, directory: SandboxDirectory, nodeagents: NodeAgentClients,
        names: SnapshotCatalog,
    ) -> None:
        self._sandboxes = sandboxes
        self._directory = directory
        self._nodeagents = nodeagents
        self._names = names

    async def create_named(
        self, sandbox_id: str, name: str | None, keep_memory: bool = True
    ) -> SnapshotInfo:
        """E2B's create: `name` (`[aenv/]alias[:tag]`) adds a build to the snapshot template of
        that name, made when there is none; without one the snapshot stands alone.

        :raise InvalidArgument: a bad name. :raise Conflict: a built template's name.
        """
        wanted = parse_snapshot_name(name) if name is not None else None
        if wanted is not None:
            await self._names.check_name(wanted)
        record = await self.create(sandbox_id, wanted.full if wanted else "", keep_memory)
        if wanted is None:
            return unnamed_info(record.snapshot_id)
        try:
            template = await self._names.add(wanted, record)
        except AenvError:
            # Taken by a template build meanwhile: the capture must not outlive the refusal.
            await self._delete_held(record.snapshot_id)
            raise
        return template_info(template, wanted.tag)

    async def create(
        self, sandbox_id: str, name: str, keep_memory: bool = True
    ) -> cluster_pb2.SnapshotRecord:
        """Captures a running sandbox (which keeps running); without memory only its disk."""
        located = self._sandboxes.running(sandbox_id)
        info = await self._nodeagents.create_snapshot(
            located.owner.nodeagent_address, sandbox_id, name, keep_memory
        )
        record = cluster_pb2.SnapshotRecord(
            snapshot_id=info.snapshot_id, node_id=located.owner.node_id, sandbox_id=sandbox_id,
            template_id=info.template_id, names=[info.name or info.snapshot_id],
            has_memory=info.has_memory, created_at=info.created_at,
            resources=located.record.resources,
            # Its guest's mounts, as the node agent's record keeps them (without tickets).
            volume_mounts=located.record.volume_mounts,
        )
        for mount in record.volume_mounts:
            mount.ClearField("ticket")
        self._directory.remember_snapshot(record)
        log.info("snapshot created",
                 extra={"sandbox_id": sandbox_id, "snapshot_id": record.snapshot_id})
        return record

    def list(self, query: SnapshotQuery) -> SnapshotPage[cluster_pb2.SnapshotRecord]:
        """Newest first, filtered by source sandbox and name."""
        matching = [r for r in self._directory.snapshots() if _matches(r, query)]
        items, next_cursor = paginate(
            matching, _order_key, newest_first=True, limit=query.limit, cursor=query.cursor
        )
        return SnapshotPage(items, next_cursor)

    def list_named(self, query: SnapshotQuery) -> SnapshotPage[SnapshotInfo]:
        """E2B's list, newest first: snapshot templates and unnamed snapshots."""
        wanted = parse_snapshot_name(query.name) if query.name is not None else None
        everything = _listed(self._names.templates(), self._directory.snapshots(), wanted)
        listed = [e for e in everything
                  if not query.sandbox_id or e.sandbox_id == query.sandbox_id]
        page, next_cursor = paginate(listed, lambda e: e.key, newest_first=True,
                                     limit=query.limit, cursor=query.cursor)
        return SnapshotPage([e.info for e in page], next_cursor)

    async def delete_named(self, text: str) -> bool:
        """E2B's delete (`DELETE /templates/{id}`): a snapshot template with every snapshot it
        holds, or one snapshot by its id (`snap-…[:default]`); False when `text` names neither.
        """
        wanted = lookup_name(text)
        if wanted is None:
            return False
        template = await self._names.held(wanted.alias)
        if template is not None:
            for snapshot_id in template.snapshot_ids:
                await self._delete_held(snapshot_id)
            await self._names.remove(template)
            log.info("snapshot template deleted", extra={"template_id": template.template_id})
            return True
        if not (wanted.alias.startswith(SNAPSHOT_ID_PREFIX) and wanted.tag == DEFAULT_TAG
                and self._directory.snapshot(wanted.alias) is not None):
            return False
        await self.delete(wanted.alias)
        return True

    async def _delete_held(self, snapshot_id: str) -> None:
        """Deletes a snapshot a template holds; one already gone is no failure."""
        try:
            await self._delete_files(snapshot_id)
        except NotFound:
            pass

    async def delete(self, snapshot_id: str) -> None:
        """One snapshot by its id; it leaves the snapshot template holding it."""
        await self._delete_files(snapshot_id)
        await self._names.forget_snapshot(snapshot_id)

    async def _delete_files(self, snapshot_id: str) -> None:
        record = self._directory.snapshot(snapshot_id)
        if record is None:
            raise NotFound(f'snapshot "{snapshot_id}" not found')
        owner = self._directory.owner_of(record.node_id)
        if owner is None:
            raise Unavailable(f'node "{record.node_id}" holding snapshot "{snapshot_id}" is down')
        try:
            await self._nodeagents.delete_snapshot(owner.nodeagent_address, snapshot_id)
        finally:
            # Also on NotFound: the holder no longer has it, whatever the mirror still says.
            self._directory.forget_snapshot(snapshot_id)
        log.info("snapshot deleted", extra={"snapshot_id": snapshot_id})


def _matches(record: cluster_pb2.SnapshotRecord, query: SnapshotQuery) -> bool:
    if query.sandbox_id and record.sandbox_id != query.sandbox_id:
        return False
    return not query.name or query.name in record.names or query.name == record.snapshot_id


def _listed(
    templates: Iterable[cluster_pb2.CatalogTemplate],
    snapshots: Iterable[cluster_pb2.SnapshotRecord], wanted: SnapshotName | None,
) -> list[Listed]:
    records = {r.snapshot_id: r for r in snapshots}
    listed: list[Listed] = []
    members: set[str] = set()
    for template in templates:
        members.update(template.snapshot_ids)
        if wanted is not None and not _names_template(wanted, template):
            continue
        first = next((records[s] for s in template.snapshot_ids if s in records), None)
        key = (template.created_at.ToNanoseconds(), template.template_id)
        tag = wanted.tag if wanted is not None and wanted.tagged else None
        listed.append(Listed(key, template_info(template, tag), first.sandbox_id if first else ""))
    for record in records.values():
        if record.snapshot_id in members or not _names_unnamed(wanted, record):
            continue
        listed.append(Listed(_order_key(record), unnamed_info(record.snapshot_id),
                             record.sandbox_id))
    return listed


def _names_template(wanted: SnapshotName, template: cluster_pb2.CatalogTemplate) -> bool:
    named = wanted.alias in template.names or wanted.alias == template.template_id
    return named and (not wanted.tagged or wanted.tag in template.tags)


def _names_unnamed(wanted: SnapshotName | None, record: cluster_pb2.SnapshotRecord) -> bool:
    return wanted is None or (wanted.alias == record.snapshot_id and wanted.tag == DEFAULT_TAG)


def _order_key(record: cluster_pb2.SnapshotRecord) -> OrderKey:
    return (record.created_at.ToNanoseconds(), record.snapshot_id)
