"""Where the template catalog and its builds are kept: etcd (`<prefix>/catalog/<id>`,
`<prefix>/builds/<id>`) in a cluster, plain dicts in tests and single-process set-ups.

Claims (`<prefix>/catalog-names/<name>`, `<prefix>/build-inputs/<digest>`) say which template
holds a name and which build makes the template of some inputs. They are created only where
absent and replaced only at the revision read, so gateway replicas agree on them without a lock;
template records change by compare-and-swap for the same reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore, RecordCache
from aenv_common.errors import NotFound

CATALOG = "catalog"
BUILDS = "builds"
NAMES = "catalog-names"
INPUTS = "build-inputs"

CatalogTemplate = cluster_pb2.CatalogTemplate
BuildRecord = cluster_pb2.TemplateBuildRecord
Mutation = Callable[[CatalogTemplate], None]


@dataclass(frozen=True)
class Claim:
    holder_id: str
    # Where the claim's key stood when read: a replacement names it (0: the key is absent).
    revision: int


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

    async def update_template(self, template_id: str, mutate: Mutation) -> CatalogTemplate:
        """Read, `mutate`, write back unless another writer came first (then again).

        :raise NotFound: no such template.
        """
        ...

    async def drop_node_template(self, template_id: str) -> None:
        """Marks a node-side template retired (`retired-templates/<id>`: nodes drop their
        copies) and removes its record (`templates/<id>`): its image is no build's any more
        (cleanup.py)."""
        ...

    async def builtins(self) -> list[cluster_pb2.TemplateRecord]:
        """The templates every node makes itself (`base`, `code-interpreter-v1`): the node-side
        records published under their own name (a build's record has no alias)."""
        ...

    async def get_claim(self, kind: str, key: str) -> Claim | None: ...

    async def claim(
        self, kind: str, key: str, holder_id: str, revision: int,
        template: CatalogTemplate | None = None,
    ) -> bool:
        """Makes `holder_id` hold the claim (and stores `template` with it, in one write) if the
        claim is still at `revision`; False when another writer changed it first."""
        ...

    async def release(self, kind: str, key: str, holder_id: str) -> None:
        """Drops the claim if `holder_id` still holds it."""
        ...


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

    async def update_template(self, template_id: str, mutate: Mutation) -> CatalogTemplate:
        return await self._store.update_record(CATALOG, template_id, CatalogTemplate, mutate)

    async def drop_node_template(self, template_id: str) -> None:
        # Retired first: a node never sees the record gone without knowing why. Its time
        # bounds how long it is kept (the node agent's templates/retire.py prunes it).
        mark = cluster_pb2.TemplateRecord(template_id=template_id)
        mark.created_at.GetCurrentTime()
        await self._store.put_record(RETIRED_TEMPLATES, template_id, mark)
        await self._store.delete_template(template_id)

    async def builtins(self) -> list[cluster_pb2.TemplateRecord]:
        return [r for r in await self._store.list_templates() if r.template_id in r.aliases]

    async def get_claim(self, kind: str, key: str) -> Claim | None:
        found = await self._store.get_versioned(kind, key, cluster_pb2.CatalogClaim)
        return None if found is None else Claim(found.record.holder_id, found.mod_revision)

    async def claim(
        self, kind: str, key: str, holder_id: str, revision: int,
        template: CatalogTemplate | None = None,
    ) -> bool:
        together = [] if template is None else [(CATALOG, template.template_id, template)]
        return await self._store.put_guarded(
            kind, key, revision, (kind, key, cluster_pb2.CatalogClaim(holder_id=holder_id)),
            *together)

    async def release(self, kind: str, key: str, holder_id: str) -> None:
        held = await self.get_claim(kind, key)
        if held is not None and held.holder_id == holder_id:
            await self._store.delete_guarded(kind, key, held.revision)


class InMemoryTemplateRecords:
    def __init__(self) -> None:
        self.templates: dict[str, CatalogTemplate] = {}
        self.builds: dict[str, BuildRecord] = {}
        self.claims: dict[tuple[str, str], Claim] = {}
        self.dropped_node_templates: list[str] = []
        self.builtin_templates: list[cluster_pb2.TemplateRecord] = []
        self._revisions = itertools.count(1)

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

    async def update_template(self, template_id: str, mutate: Mutation) -> CatalogTemplate:
        found = await self.get_template(template_id)
        if found is None:
            raise NotFound(f"catalog '{template_id}' not found")
        mutate(found)
        await self.put_template(found)
        return found

    async def drop_node_template(self, template_id: str) -> None:
        self.dropped_node_templates.append(template_id)

    async def builtins(self) -> list[cluster_pb2.TemplateRecord]:
        return list(self.builtin_templates)

    async def get_claim(self, kind: str, key: str) -> Claim | None:
        return self.claims.get((kind, key))

    async def claim(
        self, kind: str, key: str, holder_id: str, revision: int,
        template: CatalogTemplate | None = None,
    ) -> bool:
        held = self.claims.get((kind, key))
        if (held.revision if held is not None else 0) != revision:
            return False
        self.claims[kind, key] = Claim(holder_id, next(self._revisions))
        if template is not None:
            await self.put_template(template)
        return True

    async def release(self, kind: str, key: str, holder_id: str) -> None:
        held = self.claims.get((kind, key))
        if held is not None and held.holder_id == holder_id:
            del self.claims[kind, key]


M = TypeVar("M", CatalogTemplate, BuildRecord)


def _copy(record: M) -> M:
    # As etcd would: a caller's later changes never reach what was stored.
    copied = type(record)()
    copied.CopyFrom(record)
    return copied
