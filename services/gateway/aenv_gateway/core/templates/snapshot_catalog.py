"""Snapshot templates: E2B names snapshots as templates. A named snapshot is a build of the
catalog template its name holds (`CatalogTemplate.snapshot`), each tag naming a snapshot id; a
name reused adds a build and moves its tag, so the newest snapshot of a tag wins and earlier
ones stay creatable by their tags or ids. An unnamed snapshot is a template of one build whose
id is the snapshot's own (`snap-…:default`), kept nowhere but in its snapshot record.

Templates and snapshot templates share one set of names (the catalog's claims): neither takes
the other's (catalog.py refuses it).
"""

from __future__ import annotations

from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import NotFound
from aenv_gateway.core.templates.catalog import Source, TemplateCatalog, name_taken
from aenv_gateway.core.templates.names import DEFAULT_TAG
from aenv_gateway.core.templates.records import NAMES, CatalogTemplate
from aenv_gateway.core.templates.snapshot_names import (
    SNAPSHOT_ID_PREFIX,
    SnapshotName,
    full_name,
    lookup_name,
    with_tag,
)


@dataclass(frozen=True)
class SnapshotInfo:
    """E2B's SnapshotInfo: `namespace/alias:tag` (`snap-…:default` unnamed) and the names."""

    snapshot_id: str
    names: list[str]


def template_info(template: CatalogTemplate, tag: str | None = None) -> SnapshotInfo:
    """As E2B lists a snapshot template: by its name, with `tag` or else its newest build's."""
    names = [full_name(n) for n in template.names]
    shown = tag or newest_tag(template)
    return SnapshotInfo(with_tag(names[0] if names else template.template_id, shown), names)


def unnamed_info(snapshot_id: str) -> SnapshotInfo:
    return SnapshotInfo(with_tag(snapshot_id, DEFAULT_TAG), [])


def newest_tag(template: CatalogTemplate) -> str:
    newest = template.snapshot_ids[-1] if template.snapshot_ids else ""
    return next((t for t, s in sorted(template.tags.items()) if s == newest), DEFAULT_TAG)


class SnapshotCatalog:
    def __init__(self, catalog: TemplateCatalog) -> None:
        self._catalog = catalog
        # What this gateway wrote lately, over the watched copy until that catches up: a
        # sandbox created by a name just given finds it (the watch lags writes by milliseconds).
        self._fresh: dict[str, CatalogTemplate | None] = {}

    def templates(self) -> list[CatalogTemplate]:
        """The snapshot templates, from the watched catalog and this gateway's own writes."""
        watched = {t.template_id: t for t in self._catalog.records.watched_templates()}
        for template_id, fresh in list(self._fresh.items()):
            seen = watched.get(template_id)
            if fresh is None and seen is not None:
                del watched[template_id]
            elif fresh is not None and (seen is None or seen.build_count < fresh.build_count):
                watched[template_id] = fresh
            else:
                del self._fresh[template_id]  # the watch caught up
        return [t for t in watched.values() if t.snapshot]

    async def held(self, alias: str) -> CatalogTemplate | None:
        """The snapshot template of this name or id, read from etcd (not the watched copy)."""
        found = await self._catalog.find(alias)
        return found if found is not None and found.snapshot else None

    async def check_name(self, wanted: SnapshotName) -> None:
        """:raise Conflict: the name is a built template's (checked before a capture)."""
        found = await self._catalog.find(wanted.alias)
        if found is not None and not found.snapshot:
            raise name_taken(wanted.alias, found)

    def find(self, wanted: SnapshotName) -> CatalogTemplate | None:
        return next((t for t in self.templates()
                     if wanted.alias in t.names or wanted.alias == t.template_id), None)

    async def add(
        self, wanted: SnapshotName, snapshot: cluster_pb2.SnapshotRecord
    ) -> CatalogTemplate:
        """`snapshot` becomes the newest build of the snapshot template `wanted.alias` (made
        when there is none), tagged `wanted.tag`.

        :raise Conflict: the name is a built template's.
        """
        template = await self._catalog.snapshot_template(wanted.alias)
        snapshot_id = snapshot.snapshot_id

        def add(found: CatalogTemplate) -> None:
            found.snapshot_ids.append(snapshot_id)
            found.tags[wanted.tag] = snapshot_id
            found.tag_images[wanted.tag] = snapshot_id
            found.resources.CopyFrom(snapshot.resources)
            found.updated_at.CopyFrom(snapshot.created_at)
            found.build_count += 1
            found.latest_build_id = snapshot_id

        updated = await self._catalog.records.update_template(template.template_id, add)
        self._fresh[updated.template_id] = updated
        return updated

    async def forget_snapshot(self, snapshot_id: str) -> None:
        """A snapshot deleted by its id leaves the template holding it (its tags with it); a
        template left with none goes, its name free again."""
        for template in self.templates():
            if snapshot_id not in template.snapshot_ids:
                continue

            def drop(found: CatalogTemplate) -> None:
                kept = [s for s in found.snapshot_ids if s != snapshot_id]
                del found.snapshot_ids[:]
                found.snapshot_ids.extend(kept)
                for tag in [t for t, s in found.tags.items() if s == snapshot_id]:
                    del found.tags[tag]
                    found.tag_images.pop(tag, None)

            try:
                left = await self._catalog.records.update_template(template.template_id, drop)
            except NotFound:
                continue
            self._fresh[left.template_id] = left
            if not left.snapshot_ids:
                await self.remove(left)

    async def remove(self, template: CatalogTemplate) -> None:
        """The template and its names (its snapshots are the caller's to delete first)."""
        records = self._catalog.records
        await records.delete_template(template.template_id)
        self._fresh[template.template_id] = None
        for name in template.names:
            await records.release(NAMES, name, template.template_id)

    async def source(self, text: str) -> Source | None:
        """What a sandbox created from `text` restores: a snapshot template's tag (or one of
        its snapshot ids as the tag, as E2B takes build ids), `snap-…[:default]`, or else
        whatever the template catalog makes of `text`."""
        wanted = lookup_name(text)
        template = self.find(wanted) if wanted is not None else None
        if wanted is not None and template is not None:
            image = template.tag_images.get(wanted.tag)
            if image is None and wanted.tag in template.snapshot_ids:
                image = wanted.tag
            if image is None:
                raise NotFound(f"tag '{wanted.tag}' does not exist for template '{wanted.alias}'")
            return Source(image, template.template_id)
        if (wanted is not None and wanted.alias.startswith(SNAPSHOT_ID_PREFIX)
                and wanted.tag == DEFAULT_TAG):
            return Source(wanted.alias, wanted.alias)
        return await self._catalog.source(text)
