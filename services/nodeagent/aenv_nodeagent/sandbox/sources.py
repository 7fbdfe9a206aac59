"""Where a restore comes from: the one place its plans (sandbox/plans.py) are made, for a
template, a snapshot, a paused sandbox and a reset, and the memory images behind them.

A template's restore maps the template's RAM file; a snapshot's, the snapshot's memory image
(hard-linked into the sandbox's directory, so that it outlives the snapshot), or, while that
image is still being made from a frozen copy, its memory file at once and its device state once
made. A paused sandbox comes back from the delta its pause wrote onto its pinned base, or from
the image split out of its full capture.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, Internal
from aenv_nodeagent.memory.fork_delta import fork_delta
from aenv_nodeagent.memory.images import (
    BASE_MEMORY,
    BASE_STATE,
    HOT_PAGES,
    MEMORY,
    MemoryImage,
    MemoryImages,
    delta_image,
    image_in,
    link_into,
    pin_base,
)
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.model import (
    FILESYSTEM,
    FULL,
    PAUSED_STATE,
    Chain,
    Paused,
    RestoreImage,
    Sandbox,
    boot_image,
)
from aenv_nodeagent.sandbox.plans import FromSnapshot, FromTemplate, Reset, Resume
from aenv_nodeagent.sandbox.records import end_at, new_record
from aenv_nodeagent.snapshots.store import LayerStore, SnapshotMeta
from aenv_nodeagent.templates import TemplateSnapshot, TemplateStore
from aenv_nodeagent.vmm.hot_pages import read_ahead_soon
from aenv_nodeagent.vmm.ram_file import mapped_memory


class RestoreSources:
    """Makes restore plans from what this node holds."""

    def __init__(
        self, node_id: str, sandboxes_dir: Path, templates: TemplateStore, layers: LayerStore,
        memory_images: MemoryImages,
    ) -> None:
        self._node_id = node_id
        self._sandboxes_dir = sandboxes_dir
        self._templates = templates
        self._layers = layers
        self._images = memory_images

    # --- plans ---------------------------------------------------------------------------------

    def from_template(
        self, spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot
    ) -> FromTemplate:
        inputs = self._templates.inputs(template.template_id)
        image = RestoreImage(inputs, template.memory, template.state, guest_token="")
        return FromTemplate(
            record=new_record(spec, self._node_id, template, template.envd_version),
            directory=self._sandboxes_dir / spec.sandbox_id, chain=Chain(spec.template_id, []),
            image=_ready(image), template=template)

    def from_snapshot(
        self, spec: cluster_pb2.SandboxSpec, snapshot: SnapshotMeta, template: TemplateSnapshot
    ) -> FromSnapshot:
        """:raise Conflict, Internal: the snapshot cannot be restored here (`check`)."""
        self.check(snapshot)
        return FromSnapshot(
            record=new_record(spec, self._node_id, template, snapshot.envd_version),
            directory=self._sandboxes_dir / spec.sandbox_id,
            chain=Chain(snapshot.template_id, list(snapshot.layers)),
            image=lambda directory: self.snapshot_image(snapshot, directory),
            backing=self._layers.path(snapshot.layers[0]), has_memory=snapshot.has_memory)

    def for_resume(
        self, paused: Paused, timeout_s: int, *, boots: bool, timer: PhaseTimer
    ) -> Resume:
        """The paused sandbox running again under its id, on its own files."""
        record = cluster_pb2.SandboxRecord()
        record.CopyFrom(paused.record)
        record.state = cluster_pb2.SANDBOX_STATE_RUNNING
        record.pause_mode = FULL
        record.paused_image = ""
        record.envd_unresponsive_at_pause = False
        record.end_at.CopyFrom(end_at(timeout_s))
        return Resume(
            record=record, directory=paused.directory, chain=paused.chain.resumed(),
            image=lambda _: self.paused_image(paused, boots=boots, timer=timer))

    def for_reset(self, sandbox: Sandbox, snapshot: SnapshotMeta) -> Reset:
        """The sandbox rewound to `snapshot` in place: its directory, record and slot."""
        return Reset(
            record=sandbox.record, directory=sandbox.directory,
            chain=Chain(snapshot.template_id, list(snapshot.layers)),
            image=lambda directory: self.snapshot_image(snapshot, directory),
            backing=self._layers.path(snapshot.layers[0]), slot=sandbox.slot)

    def check(self, snapshot: SnapshotMeta) -> SnapshotMeta:
        """Refuse a snapshot taken under another accelerator, kernel or template build.

        :raise Conflict: taken under other inputs.
        :raise Internal: its disk layers are missing.
        """
        inputs = self._templates.inputs(snapshot.template_id)
        if inputs.key() != snapshot.template_key:
            raise Conflict(
                f"snapshot \"{snapshot.snapshot_id}\" was taken with accelerator "
                f"{snapshot.accelerator}, kernel {snapshot.kernel_version} (artifacts "
                f"{snapshot.artifacts_digest[:12]}); this node runs {inputs.accel.accel}, kernel "
                f"{inputs.artifacts.kernel_version} (artifacts {inputs.artifacts.digest[:12]})"
            )
        if not all(self._layers.path(layer).is_file() for layer in snapshot.layers):
            raise Internal(f"snapshot \"{snapshot.snapshot_id}\" is missing disk layers")
        return snapshot

    # --- images --------------------------------------------------------------------------------

    async def snapshot_image(self, snapshot: SnapshotMeta, directory: Path) -> RestoreImage:
        """The snapshot's image pinned into a sandbox's directory and mapped from there: the
        sandbox keeps the base of its delta pauses and captures when the snapshot is deleted (a
        fork deletes its own at once)."""
        inputs = self._templates.inputs(snapshot.template_id)
        if not snapshot.has_memory:
            return boot_image(inputs)
        partial = self._images.building_memory(snapshot.directory)
        if partial is not None and (delta := fork_delta(snapshot.directory)) is not None:
            # A fork's first children: its reference, with the delta loaded onto it.
            pinned = pin_base(delta.base, directory)
            return RestoreImage(inputs, pinned.memory, delta.stream, snapshot.guest_token)
        if partial is not None:  # launched on the memory file now, loaded once it is made
            async def later_state() -> Path:
                image = await self.materialized(snapshot)
                return link_into(image.device_state, directory / BASE_STATE)

            memory = link_into(partial, directory / BASE_MEMORY)
            return RestoreImage(inputs, memory, None, snapshot.guest_token, later_state)
        pinned = pin_base(await self.materialized(snapshot), directory)
        return RestoreImage(inputs, pinned.memory, pinned.device_state, snapshot.guest_token)

    async def materialized(self, snapshot: SnapshotMeta) -> MemoryImage:
        """The snapshot's shared memory image, waiting for (or starting) its making."""
        return await asyncio.shield(self.materialize(snapshot))

    def materialize(self, snapshot: SnapshotMeta) -> asyncio.Future[MemoryImage]:
        return self._images.ensure(snapshot.state, snapshot.directory)

    def paused_capture(self, paused: Paused) -> asyncio.Future[MemoryImage]:
        """The image split out of a paused sandbox's full capture (made on first use)."""
        return self._images.ensure(paused.directory / PAUSED_STATE, paused.directory)

    async def paused_image(
        self, paused: Paused, *, boots: bool, timer: PhaseTimer
    ) -> RestoreImage:
        inputs = self._templates.inputs(paused.chain.template_id)
        if boots:
            return boot_image(inputs)
        token = paused.record.envd_access_token
        if (delta := delta_image(paused.directory)) is not None:
            read_ahead_soon(delta.memory, paused.directory / HOT_PAGES)
            return RestoreImage(inputs, delta.memory, delta.device_state, token)
        image = await timer.timed("memory_image", asyncio.shield(self.paused_capture(paused)))
        return RestoreImage(inputs, image.memory, image.device_state, token)

    async def running_image(self, sandbox: Sandbox, chain: Chain) -> MemoryImage | None:
        """The memory image the sandbox's RAM maps and its device state: the template's, a
        snapshot's, or its own (pinned or not); None for a cold boot's RAM."""
        try:
            memory = mapped_memory(sandbox.vm.pid)
        except Internal:
            return None
        template = await self._templates.get(chain.template_id)
        if _same_file(memory, template.memory):
            image = MemoryImage(template.memory, template.state)
        elif memory.name == BASE_MEMORY:
            image = MemoryImage(memory, memory.with_name(BASE_STATE))
        elif memory.name == MEMORY:
            image = image_in(memory.parent)
        else:
            return None
        return image if all(path.is_file() for path in image) else None


def resumes_by_boot(paused: Paused, reboot: bool) -> bool:
    """A resume cold-boots when asked to, and always after a filesystem-only pause."""
    return reboot or paused.record.pause_mode == FILESYSTEM


def _ready(image: RestoreImage) -> Callable[[Path], Awaitable[RestoreImage]]:
    async def ready(_: Path) -> RestoreImage:
        return image

    return ready


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

