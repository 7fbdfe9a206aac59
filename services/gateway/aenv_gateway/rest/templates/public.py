"""What the template API shows beyond the catalog's own records: the built-in templates (`base`,
`code-interpreter-v1`) as E2B shows its public default templates, and a catalog template's tags
as assignments (tag_views.py).

A built-in template is no catalog template: every node makes it itself and publishes it under
its own name (`templates/<name>`, the name among its aliases). E2B's defaults belong to E2B's
team, so for every caller they exist (`Template.exists` is True: the alias answers 403), have
one tag, `default`, are listed by `/default-templates` and not by `/templates`, and refuse
changes (403).
"""

from __future__ import annotations

import uuid
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import PermissionDenied
from aenv_gateway.core.templates.catalog import TagInfo, TemplateCatalog
from aenv_gateway.core.templates.names import DEFAULT_TAG, split_name
from aenv_gateway.core.templates.records import CatalogTemplate
from aenv_gateway.rest.schemas import rfc3339
from aenv_gateway.rest.templates.tag_views import Assignment

BuiltIn = cluster_pb2.TemplateRecord
# A built-in template's one build has an id derived from its name and envd version (the SDK
# parses build ids as UUIDs).
_BUILDS = uuid.UUID("0c6c7a8e-2f55-4d57-8f0e-5b9f3c1d7a24")
NOT_YOURS = "You don't have access to this sandbox template"
NOT_YOUR_ALIAS = "You don't have access to this template alias"


def builtin_build_id(record: BuiltIn) -> str:
    return str(uuid.uuid5(_BUILDS, f"{record.template_id}/{record.envd_version}"))


def present_builtin(record: BuiltIn, default_version: str) -> dict[str, Any]:
    """Template, as E2B shows a default template another team owns: public, `isDefault`, no
    usage figures."""
    r = record.default_resources
    created = rfc3339(record.created_at)
    return {
        "templateID": record.template_id, "buildID": builtin_build_id(record),
        "cpuCount": r.vcpus, "memoryMB": r.memory_mib, "diskSizeMB": r.disk_mib,
        "public": True, "isDefault": True,
        "aliases": [record.template_id], "names": [record.template_id],
        "createdAt": created, "updatedAt": created, "createdBy": None, "lastSpawnedAt": None,
        "spawnCount": 0, "buildCount": 0,
        "envdVersion": record.envd_version or default_version, "buildStatus": "ready",
    }


class PublicTemplates:
    def __init__(self, catalog: TemplateCatalog) -> None:
        self._catalog = catalog

    async def builtins(self) -> list[BuiltIn]:
        return sorted(await self._catalog.records.builtins(), key=lambda r: r.template_id)

    async def builtin(self, id_or_name: str) -> BuiltIn | None:
        """The built-in template of this name (`name[:tag]`), unless the catalog holds one."""
        name = split_name(id_or_name).name
        if await self._catalog.find(name) is not None:
            return None
        return next((r for r in await self.builtins() if r.template_id == name), None)

    async def refuse_builtin(self, id_or_name: str, message: str = NOT_YOURS) -> None:
        """:raise PermissionDenied: a built-in template, which no caller may change."""
        if await self.builtin(id_or_name) is not None:
            raise PermissionDenied(message)

    async def tags(self, id_or_name: str) -> list[TagInfo]:
        """The template's tags; a built-in template's one `default`.

        :raise NotFound: no such template.
        """
        record = await self.builtin(id_or_name)
        if record is not None:
            return [TagInfo(DEFAULT_TAG, builtin_build_id(record), record.created_at)]
        return await self._catalog.tags(id_or_name)

    async def owned(self, id_or_name: str) -> CatalogTemplate:
        """A template the caller may see the tag history of (E2B: its own team's).

        :raise PermissionDenied: a built-in template. :raise NotFound: no such template.
        """
        await self.refuse_builtin(id_or_name)
        return await self._catalog.require(id_or_name)

    async def assignments(self, id_or_name: str) -> list[Assignment]:
        template = await self.owned(id_or_name)
        found = []
        for tag, build_id in template.tags.items():
            build = await self._catalog.records.get_build(build_id)
            finished = build.finished_at if build and build.HasField("finished_at") else None
            created = build.created_at if build is not None else template.updated_at
            found.append(Assignment(template.template_id, tag, build_id,
                                    finished or created, created, finished))
        return found
