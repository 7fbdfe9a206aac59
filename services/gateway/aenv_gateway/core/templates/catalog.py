"""The template catalog: E2B templates by id and name, their tags, and which build each tag
creates. A sandbox created from `name[:tag]` restores that build's node-side template (whose id
is the build's image id, see builds.py); names the catalog does not hold (`base`, snapshot ids)
pass through unchanged.

Names are unique across gateway replicas: a template is made together with its name's claim,
created only where absent (records.py); templates change by compare-and-swap.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, InvalidArgument, NotFound
from aenv_common.ids import new_template_id
from aenv_gateway.core.templates.names import DEFAULT_TAG, TemplateName, check_tag, split_name
from aenv_gateway.core.templates.records import (
    INPUTS,
    NAMES,
    BuildRecord,
    CatalogTemplate,
    TemplateRecords,
)

# A name's claim is contested only by gateways asking for it at the same moment.
CLAIM_ATTEMPTS = 16


@dataclass(frozen=True)
class TagInfo:
    tag: str
    build_id: str
    created_at: Timestamp


@dataclass(frozen=True)
class Source:
    """What a sandbox created by a catalog name restores."""

    image: str  # the node-side template (a build's)
    template_id: str  # the catalog template: E2B's API names it as the sandbox's template


def now_timestamp(clock: Callable[[], float]) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(clock() * 1e9))
    return stamp


def name_taken(name: str, holder: CatalogTemplate) -> Conflict:
    """A name asked of the other kind: templates and snapshots share one set of names."""
    kind = "snapshot" if holder.snapshot else "template"
    return Conflict(f"name '{name}' is already used by a {kind}")


class TemplateCatalog:
    def __init__(self, records: TemplateRecords, clock: Callable[[], float] = time.time) -> None:
        self._records = records
        self._clock = clock

    @property
    def records(self) -> TemplateRecords:
        return self._records

    async def request_build(
        self, name: TemplateName, extra_tags: Sequence[str], resources: cluster_pb2.Resources,
        min_free_disk_mib: int | None = None,
    ) -> tuple[CatalogTemplate, BuildRecord]:
        """A new build of the template called `name.name` (made when there is none), to be
        tagged `name.tag` and `extra_tags` once ready."""
        for tag in extra_tags:
            check_tag(tag)
        stamp = now_timestamp(self._clock)
        template = await self._named(name.name)
        build = BuildRecord(
            build_id=str(uuid.uuid4()), template_id=template.template_id,
            status=cluster_pb2.BUILD_STATUS_WAITING,
            tags=list(dict.fromkeys([name.tag, *extra_tags])), resources=resources,
            created_at=stamp,
        )
        if min_free_disk_mib is not None:
            build.min_free_disk_mib = min_free_disk_mib
        await self._records.put_build(build)

        def count(found: CatalogTemplate) -> None:
            found.resources.CopyFrom(resources)
            found.updated_at.CopyFrom(stamp)
            found.build_count += 1
            found.latest_build_id = build.build_id

        return await self._records.update_template(template.template_id, count), build

    async def _named(self, name: str, snapshot: bool = False) -> CatalogTemplate:
        """The template called `name`, made when there is none: made with its name's claim in
        one write, so gateways asking at once agree on one. A claim whose template is gone
        (deleted meanwhile) is taken over at the revision read.

        :raise Conflict: the name is a snapshot template's and a built one is asked for, or
            the other way round (templates and snapshots share one set of names).
        """
        for _ in range(CLAIM_ATTEMPTS):
            held = await self._records.get_claim(NAMES, name)
            if held is not None and (found := await self._records.get_template(held.holder_id)):
                if found.snapshot != snapshot:
                    raise name_taken(name, found)
                return found
            stamp = now_timestamp(self._clock)
            fresh = CatalogTemplate(template_id=new_template_id(), names=[name],
                                    created_at=stamp, updated_at=stamp, snapshot=snapshot)
            if await self._records.claim(NAMES, name, fresh.template_id,
                                         held.revision if held else 0, fresh):
                return fresh
        raise Conflict(f"template '{name}' kept changing; try again")

    async def snapshot_template(self, name: str) -> CatalogTemplate:
        """The snapshot template called `name`, made when there is none (snapshot_catalog.py).

        :raise Conflict: the name is a built template's.
        """
        return await self._named(name, snapshot=True)

    async def require(self, id_or_name: str) -> CatalogTemplate:
        """:raise NotFound: no template has this id or name."""
        template = await self.find(id_or_name)
        if template is None:
            raise NotFound(f"template '{id_or_name}' not found")
        return template

    async def find(self, id_or_name: str) -> CatalogTemplate | None:
        """The template of this id or name, read from etcd (not the watched copy)."""
        if not id_or_name or "/" in id_or_name:
            return None
        if (by_id := await self._records.get_template(id_or_name)) is not None:
            return by_id
        held = await self._records.get_claim(NAMES, id_or_name)
        return None if held is None else await self._records.get_template(held.holder_id)

    async def resolve(self, text: str) -> str | None:
        """The node-side template a sandbox of `name[:tag]` restores; None when the catalog
        holds no such name (the caller then takes `text` as it is).

        :raise NotFound: the template exists but has no such tag, or no ready build yet.
        """
        found = await self.source(text)
        return found.image if found is not None else None

    async def source(self, text: str) -> Source | None:
        """What a sandbox of `name[:tag]` restores and the catalog template that is; None when
        the catalog holds no such name. Read from the watched catalog: no round trip on a
        create.

        :raise NotFound: the template exists but has no such tag (nor ready build of that id),
            or no ready build yet.
        """
        wanted = split_name(text)
        template = next((t for t in self._records.watched_templates()
                         if wanted.name == t.template_id or wanted.name in t.names), None)
        if template is None:
            return None
        image: str | None = template.tag_images.get(wanted.tag)
        if image is None and (fresh := await self._records.get_template(template.template_id)):
            image = fresh.tag_images.get(wanted.tag)  # the watched copy may lag a new build
        if image is None:
            image = await self._ready_build_image(template.template_id, wanted.tag)
        if image is None:
            # E2B's words: clients (Harbor) wait for a build still running on "does not exist".
            missing = f"tag '{wanted.tag}' does not exist for template '{wanted.name}'"
            if wanted.tag == DEFAULT_TAG:
                missing += ": it has no ready build yet"
            raise NotFound(missing)
        return Source(image, template.template_id)

    async def _ready_build_image(self, template_id: str, tag: str) -> str | None:
        """As E2B's tag lookup, a tag may also be one of the template's build ids: that build's
        image once it is ready (None while it runs, failed, or is another template's)."""
        build = await self._records.get_build(tag)
        if build is None or build.template_id != template_id:
            return None
        if build.status != cluster_pb2.BUILD_STATUS_READY:
            return None
        return build.image_id or build.build_id

    async def publish(self, build: BuildRecord) -> None:
        """A build became ready: its tags now create it."""
        def tag(template: CatalogTemplate) -> None:
            for name in build.tags:
                template.tags[name] = build.build_id
                template.tag_images[name] = build.image_id or build.build_id
            template.resources.CopyFrom(build.resources)
            template.updated_at.CopyFrom(now_timestamp(self._clock))

        try:
            await self._records.update_template(build.template_id, tag)
        except NotFound:
            pass  # deleted while it built

    async def assign_tags(self, target: str, tags: Sequence[str]) -> tuple[str, list[str]]:
        """Points `tags` at the build `target` (`name:tag`) names.

        :raise NotFound: no such template or tag. :raise InvalidArgument: a bad tag.
        """
        if not tags:
            raise InvalidArgument("tags must name at least one tag")
        for tag in tags:
            check_tag(tag)
        wanted = split_name(target)
        template = await self.require(wanted.name)
        assigned: list[str] = []

        def point(found: CatalogTemplate) -> None:
            build_id = found.tags.get(wanted.tag)
            if build_id is None:
                raise NotFound(f"template '{wanted.name}' has no tag '{wanted.tag}'")
            for tag in tags:
                found.tags[tag] = build_id
                found.tag_images[tag] = found.tag_images[wanted.tag]
            assigned[:] = [build_id]

        await self._records.update_template(template.template_id, point)
        return assigned[0], list(tags)

    async def remove_tags(self, name: str, tags: Sequence[str]) -> None:
        """:raise NotFound: no such template, or one of the tags is not on it."""
        template = await self.require(split_name(name).name)

        def remove(found: CatalogTemplate) -> None:
            missing = [tag for tag in tags if tag not in found.tags]
            if missing:
                raise NotFound(f"template '{name}' has no tag '{missing[0]}'")
            for tag in tags:
                del found.tags[tag]
                found.tag_images.pop(tag, None)

        await self._records.update_template(template.template_id, remove)

    async def tags(self, id_or_name: str) -> list[TagInfo]:
        template = await self.require(split_name(id_or_name).name)
        found = []
        for tag, build_id in sorted(template.tags.items()):
            build = await self._records.get_build(build_id)
            created = build.finished_at if build is not None else template.updated_at
            found.append(TagInfo(tag, build_id, created))
        return found

    async def list_templates(self) -> list[CatalogTemplate]:
        """Built templates: snapshot templates are listed as snapshots (`GET /snapshots`)."""
        templates = [t for t in await self._records.list_templates() if not t.snapshot]
        return sorted(templates, key=lambda t: t.created_at.ToNanoseconds())

    async def latest_build(self, template: CatalogTemplate) -> BuildRecord | None:
        """The newest build asked for, read by its id (not by listing every build)."""
        if not template.latest_build_id:
            return None
        return await self._records.get_build(template.latest_build_id)

    async def builds_of(self, template_id: str) -> list[BuildRecord]:
        builds = [b for b in await self._records.list_builds() if b.template_id == template_id]
        return sorted(builds, key=lambda b: b.created_at.ToNanoseconds())

    async def delete(
        self, id_or_name: str, building: Callable[[BuildRecord], bool]
    ) -> list[BuildRecord] | None:
        """Removes the template, its names and its build records; returns the builds removed
        (None when there is no such template).

        :raise Conflict: one of its builds is still running (on any gateway).
        """
        template = await self.find(id_or_name)
        if template is None:
            return None
        builds = await self.builds_of(template.template_id)
        if any(building(b) for b in builds):
            raise Conflict(f"template '{id_or_name}' is being built")
        await self._records.delete_template(template.template_id)
        for name in template.names:
            await self._records.release(NAMES, name, template.template_id)
        for build in builds:
            await self._records.delete_build(build.build_id)
            if build.inputs_digest:
                await self._records.release(INPUTS, build.inputs_digest, build.build_id)
        return builds
