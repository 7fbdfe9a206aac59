"""The template catalog: E2B templates by id and name, their tags, and which build each tag
creates. A sandbox created from `name[:tag]` restores that build's node-side template (whose id
is the build's image id, see builds.py); names the catalog does not hold (`base`, snapshot ids)
pass through unchanged.

Mutations are serialised in this process; names are unique across the catalog.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, InvalidArgument, NotFound
from aenv_common.ids import new_template_id
from aenv_gateway.templates.names import DEFAULT_TAG, TemplateName, check_tag, split_name
from aenv_gateway.templates.records import BuildRecord, CatalogTemplate, TemplateRecords


@dataclass(frozen=True)
class TagInfo:
    tag: str
    build_id: str
    created_at: Timestamp


def now_timestamp(clock: Callable[[], float]) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(clock() * 1e9))
    return stamp


class TemplateCatalog:
    def __init__(self, records: TemplateRecords, clock: Callable[[], float] = time.time) -> None:
        self._records = records
        self._clock = clock
        self._lock = asyncio.Lock()

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
        async with self._lock:
            template = await self.find(name.name)
            stamp = now_timestamp(self._clock)
            if template is None:
                template = CatalogTemplate(template_id=new_template_id(), names=[name.name],
                                           created_at=stamp)
            template.resources.CopyFrom(resources)
            template.updated_at.CopyFrom(stamp)
            template.build_count += 1
            build = BuildRecord(
                build_id=str(uuid.uuid4()), template_id=template.template_id,
                status=cluster_pb2.BUILD_STATUS_WAITING,
                tags=list(dict.fromkeys([name.tag, *extra_tags])), resources=resources,
                created_at=stamp,
            )
            if min_free_disk_mib is not None:
                build.min_free_disk_mib = min_free_disk_mib
            template.latest_build_id = build.build_id
            await self._records.put_build(build)
            await self._records.put_template(template)
        return template, build

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
        for template in await self._records.list_templates():
            if id_or_name in template.names:
                return template
        return None

    async def resolve(self, text: str) -> str | None:
        """The node-side template a sandbox of `name[:tag]` restores; None when the catalog
        holds no such name (the caller then takes `text` as it is). Read from the watched
        catalog: no round trip on a create.

        :raise NotFound: the template exists but has no such tag, or no ready build yet.
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
            if wanted.tag == DEFAULT_TAG:
                raise NotFound(f"template '{wanted.name}' has no ready build yet")
            raise NotFound(f"template '{wanted.name}' has no tag '{wanted.tag}'")
        return image

    async def publish(self, build: BuildRecord) -> None:
        """A build became ready: its tags now create it."""
        async with self._lock:
            template = await self._records.get_template(build.template_id)
            if template is None:
                return  # deleted while it built
            for tag in build.tags:
                template.tags[tag] = build.build_id
                template.tag_images[tag] = build.image_id or build.build_id
            template.resources.CopyFrom(build.resources)
            template.updated_at.CopyFrom(now_timestamp(self._clock))
            await self._records.put_template(template)

    async def assign_tags(self, target: str, tags: Sequence[str]) -> tuple[str, list[str]]:
        """Points `tags` at the build `target` (`name:tag`) names.

        :raise NotFound: no such template or tag. :raise InvalidArgument: a bad tag.
        """
        if not tags:
            raise InvalidArgument("tags must name at least one tag")
        for tag in tags:
            check_tag(tag)
        wanted = split_name(target)
        async with self._lock:
            template = await self.require(wanted.name)
            build_id = template.tags.get(wanted.tag)
            if build_id is None:
                raise NotFound(f"template '{wanted.name}' has no tag '{wanted.tag}'")
            for tag in tags:
                template.tags[tag] = build_id
                template.tag_images[tag] = template.tag_images[wanted.tag]
            await self._records.put_template(template)
        return build_id, list(tags)

    async def remove_tags(self, name: str, tags: Sequence[str]) -> None:
        """:raise NotFound: no such template, or one of the tags is not on it."""
        async with self._lock:
            template = await self.require(split_name(name).name)
            missing = [tag for tag in tags if tag not in template.tags]
            if missing:
                raise NotFound(f"template '{name}' has no tag '{missing[0]}'")
            for tag in tags:
                del template.tags[tag]
                template.tag_images.pop(tag, None)
            await self._records.put_template(template)

    async def tags(self, id_or_name: str) -> list[TagInfo]:
        template = await self.require(split_name(id_or_name).name)
        found = []
        for tag, build_id in sorted(template.tags.items()):
            build = await self._records.get_build(build_id)
            created = build.finished_at if build is not None else template.updated_at
            found.append(TagInfo(tag, build_id, created))
        return found

    async def list_templates(self) -> list[CatalogTemplate]:
        templates = await self._records.list_templates()
        return sorted(templates, key=lambda t: t.created_at.ToNanoseconds())

    async def latest_build(self, template: CatalogTemplate) -> BuildRecord | None:
        """The newest build asked for, read by its id (not by listing every build)."""
        if not template.latest_build_id:
            return None
        return await self._records.get_build(template.latest_build_id)

    async def builds_of(self, template_id: str) -> list[BuildRecord]:
        builds = [b for b in await self._records.list_builds() if b.template_id == template_id]
        return sorted(builds, key=lambda b: b.created_at.ToNanoseconds())

    async def delete(self, id_or_name: str, building: Callable[[str], bool]) -> bool:
        """Removes the template and its build records; False when there is none.

        :raise Conflict: one of its builds is still running.
        """
        async with self._lock:
            template = await self.find(id_or_name)
            if template is None:
                return False
            builds = await self.builds_of(template.template_id)
            if any(building(b.build_id) for b in builds):
                raise Conflict(f"template '{id_or_name}' is being built")
            await self._records.delete_template(template.template_id)
            for build in builds:
                await self._records.delete_build(build.build_id)
        return True
