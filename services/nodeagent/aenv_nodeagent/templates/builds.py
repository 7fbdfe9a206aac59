"""Template builds on this node, as E2B's template build asks for them: a base (an OCI image, or
another template this node knows), a recipe, sizes; the result is a captured template every
sandbox of this node can restore, its inputs saved so it outlives a restart, and its record.

    builds = TemplateBuilds(store, bases, SavedTemplates(saved_dir, defaults), publish)
    built = await builds.build(BuildRequest("app", "b1", recipe, from_image="python:3.11"), log)

A new build of an existing template id replaces it for new sandboxes only when it succeeds: a
failed build leaves the previous version registered and usable.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_common.snapshots.codec import check_name
from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.images import DiskSize
from aenv_nodeagent.images.auth import Login
from aenv_nodeagent.images.sources import layer_line
from aenv_nodeagent.templates.bases import ImageBases
from aenv_nodeagent.templates.distribution import TemplateDistribution
from aenv_nodeagent.templates.model import TemplateInputs, TemplateSnapshot
from aenv_nodeagent.templates.recipe import Recipe
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.steps import BASE_STEP, Log
from aenv_nodeagent.templates.store import TemplateStore

log = logging.getLogger(__name__)

Publish = Callable[[cluster_pb2.TemplateRecord], Awaitable[object]]


@dataclass(frozen=True)
class BuildRequest:
    template_id: str
    build_id: str
    recipe: Recipe
    from_image: str | None = None
    from_template: str | None = None
    login: Login | None = field(default=None, repr=False)
    # 0: the node's default.
    vcpus: int = 0
    memory_mib: int = 0
    disk_mib: int = 0
    # Run every step, reusing no step layer.
    force: bool = False
    # E2B's minFreeDiskMb: free room the image's disk has past its files (None: the node's).
    min_free_disk_mib: int | None = None


@dataclass(frozen=True)
class ImageDiskSizes:
    """How large an image's disk is made: its files plus `min_free_mib` (unless the build asks
    for other room), at least the node's default disk, at most `max_mib`."""

    min_free_mib: int = 1024
    max_mib: int = 65536


@dataclass(frozen=True)
class Built:
    snapshot: TemplateSnapshot
    record: cluster_pb2.TemplateRecord
    phases_ms: dict[str, float]


class TemplateBuilds:
    def __init__(
        self, store: TemplateStore, bases: ImageBases, saved: SavedTemplates, publish: Publish,
        distribution: TemplateDistribution | None = None,
        sizes: ImageDiskSizes = ImageDiskSizes(),
    ) -> None:
        self._store = store
        self._bases = bases
        self._saved = saved
        self._defaults = saved.defaults  # the node's artifacts, accelerator and default sizes
        self._publish = publish
        # Built templates go to snapstore, so other nodes create from them without a build.
        self._distribution = distribution
        self._sizes = sizes

    def load_saved(self) -> list[str]:
        """Registers the templates built or pulled here before (at start); returns their ids."""
        loaded = self._saved.load_all()
        for inputs in loaded:
            self._store.register(inputs)
        return [inputs.template_id for inputs in loaded]

    async def build(self, request: BuildRequest, build_log: Log) -> Built:
        """:raise InvalidArgument: a bad request, or a step that failed (`step N (KIND): ...`).
        :raise AenvError: the image could not be had (`images.errors`), or the guest broke off.
        """
        check_name("template id", request.template_id)
        started = time.monotonic()
        inputs, phases = await self._inputs(request, build_log)
        previous = self._store.inputs(request.template_id) if self._store.has(
            request.template_id) else None
        self._store.register(inputs)
        try:
            build_log("booting the template's VM to run its recipe", BASE_STEP)
            capture_started = time.monotonic()
            snapshot = await self._store.get(request.template_id, build_log,
                                             reuse_layers=not request.force)
        except BaseException:
            self._store.unregister(request.template_id, previous)
            # Nothing of a failed build is kept: its image's base disk neither, unless another
            # template (or a build under way) stands on it.
            self._bases.drop_unless_used(inputs.rootfs.path, {
                self._store.inputs(t).rootfs.path for t in self._store.registered()})
            raise
        phases["capture"] = (time.monotonic() - capture_started) * 1000
        self._saved.save(inputs)
        if self._distribution is not None:
            self._distribution.share_soon(inputs, snapshot)
        record = _record(snapshot)
        await self._publish(record)
        phases["total"] = (time.monotonic() - started) * 1000
        log.info("template built", extra={"template": request.template_id,
                                          "build": request.build_id,
                                          **{f"{k}_ms": round(v) for k, v in phases.items()}})
        return Built(snapshot, record, phases)

    async def resolve_image(self, reference: str, login: Login | None = None) -> str:
        """What a build from `reference` would pull now (bases.py)."""
        return await self._bases.resolve(reference, login)

    async def _inputs(
        self, request: BuildRequest, build_log: Log
    ) -> tuple[TemplateInputs, dict[str, float]]:
        disk_mib = request.disk_mib or self._defaults.disk_mib
        if request.from_image:
            build_log(f"pulling {request.from_image}", BASE_STEP)
            min_free = (request.min_free_disk_mib if request.min_free_disk_mib is not None
                        else self._sizes.min_free_mib)
            disk = await self._bases.base(request.from_image, DiskSize(
                disk_mib, min_free, self._sizes.max_mib), request.login,
                lambda *layer: build_log(layer_line(*layer), BASE_STEP))
            disk_mib = disk.disk_mib
            build_log(f"base disk of {disk.image} ({disk.digest}) ready", BASE_STEP)
            inputs = dataclasses.replace(
                self._defaults, rootfs=RootfsImage(disk.path, disk.digest, ()),
                recipe=request.recipe.on_image(disk.config))
            phases = {f"base_{k}": v for k, v in disk.phases_ms.items()}
        elif request.from_template:
            parent = self._store.inputs(request.from_template)
            inputs, phases = dataclasses.replace(
                parent, recipe=request.recipe.after(parent.recipe)), {}
        else:
            raise InvalidArgument("a template build needs fromImage or fromTemplate")
        return dataclasses.replace(
            inputs, template_id=request.template_id, disk_mib=disk_mib,
            vcpus=request.vcpus or self._defaults.vcpus,
            memory_mib=request.memory_mib or self._defaults.memory_mib,
        ), phases


def _record(snapshot: TemplateSnapshot) -> cluster_pb2.TemplateRecord:
    created = Timestamp()
    created.GetCurrentTime()
    return cluster_pb2.TemplateRecord(
        template_id=snapshot.template_id,
        default_resources=cluster_pb2.Resources(
            vcpus=snapshot.vcpus, memory_mib=snapshot.memory_mib, disk_mib=snapshot.disk_mib),
        envd_version=snapshot.envd_version,
        created_at=created,
    )
