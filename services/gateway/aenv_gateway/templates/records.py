"""Where the template catalog and its builds are kept: etcd (`<prefix>/catalog/<id>`,
`<prefix>/builds/<id>`) in a cluster, plain dicts in tests and single-process set-ups."""

from __future__ import annotations

from typing import Protocol, TypeVar

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore, RecordCache

CATALOG = "catalog"
BUILDS = "builds"

CatalogTemplate = cluster_pb2.CatalogTemplate
BuildRecord = cluster_pb2.TemplateBuildRecord


class TemplateRecords(Protocol):
    def watched_templates(self) -> list[CatalogTemplate]:
        """The catalog as last seen (a watched copy: no round trip, may lag writes by a few
        milliseconds): for resolving names on every sandbox create."""
        ...

    async def get_template(self, template_id: str) -> CatalogTemplate | None: ...
    async def list_templates(self) -> list[CatalogTemplate]: ...
    async def put_template(self, record: CatalogTemplate) -> None: ...
    async def delete_template(self, template_id: str) -> None: ...
    async def get_build(self, build_id: str) -> BuildRecord | None: ...
    async def list_builds(self) -> list[BuildRecord]: ...
    async def put_build(self, record: BuildRecord) -> None: ...
    async def delete_build(self, build_id: str) -> None: ...


class EtcdTemplateRecords:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store
        self._watched = RecordCache(store, CATALOG, CatalogTemplate)

    @classmethod
    async def open(cls, store: ClusterStore) -> EtcdTemplateRecords:
        records = cls(store)
        await records._watched.start()
        return records

    async def close(self) -> None:
        await self._watched.stop()

    def watched_templates(self) -> list[CatalogTemplate]:
        return self._watched.values()

    async def get_template(self, template_id: str) -> CatalogTemplate | None:
        return await self._store.get_record(CATALOG, template_id, CatalogTemplate)

    async def list_templates(self) -> list[CatalogTemplate]:
        return await self._store.list_records(CATALOG, CatalogTemplate)

    async def put_template(self, record: CatalogTemplate) -> None:
        await self._store.put_record(CATALOG, record.template_id, record)

    async def delete_template(self, template_id: str) -> None:
        await self._store.delete_record(CATALOG, template_id)

    async def get_build(self, build_id: str) -> BuildRecord | None:
        return await self._store.get_record(BUILDS, build_id, BuildRecord)

    async def list_builds(self) -> list[BuildRecord]:
        return await self._store.list_records(BUILDS, BuildRecord)

    async def put_build(self, record: BuildRecord) -> None:
        await self._store.put_record(BUILDS, record.build_id, record)

    async def delete_build(self, build_id: str) -> None:
        await self._store.delete_record(BUILDS, build_id)


class InMemoryTemplateRecords:
    def __init__(self) -> None:
        self.templates: dict[str, CatalogTemplate] = {}
        self.builds: dict[str, BuildRecord] = {}

    def watched_templates(self) -> list[CatalogTemplate]:
        return [_copy(r) for r in self.templates.values()]

    async def get_template(self, template_id: str) -> CatalogTemplate | None:
        found = self.templates.get(template_id)
        return _copy(found) if found is not None else None

    async def list_templates(self) -> list[CatalogTemplate]:
        return [_copy(r) for r in self.templates.values()]

    async def put_template(self, record: CatalogTemplate) -> None:
        self.templates[record.template_id] = _copy(record)

    async def delete_template(self, template_id: str) -> None:
        self.templates.pop(template_id, None)

    async def get_build(self, build_id: str) -> BuildRecord | None:
        found = self.builds.get(build_id)
        return _copy(found) if found is not None else None

    async def list_builds(self) -> list[BuildRecord]:
        return [_copy(r) for r in self.builds.values()]

    async def put_build(self, record: BuildRecord) -> None:
        self.builds[record.build_id] = _copy(record)

    async def delete_build(self, build_id: str) -> None:
        self.builds.pop(build_id, None)


M = TypeVar("M", CatalogTemplate, BuildRecord)


def _copy(record: M) -> M:
    # As etcd would: a caller's later changes never reach what was stored.
    copied = type(record)()
    copied.CopyFrom(record)
    return copied
