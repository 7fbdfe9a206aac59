"""Templates in snapstore, so any node creates from a template built on another without building
it again. Two manifests per template:

- `template-<id>`: what makes it — its saved inputs (saved.py) and its rootfs;
- `template-<id>-<key>`: its captured snapshot (frozen disk layer, RAM, device state), for the
  nodes whose inputs key matches — the same guest artifacts, accelerator, kernel and size.

A push a node stop cut short is pushed again when the node starts (`resume`).

A node asked for a template it does not know pulls the first, places the rootfs (kept by digest;
one this host already holds is used as it is), then the second when its key matches, its disk
layer re-pointed at the local rootfs. Without a matching snapshot the template is captured here
from its inputs on first use, as on the node that built it. Pushes run in the background with
the snapshot persistence's retries; chunks the store has are not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from aenv_common.cluster import ClusterStore
from aenv_common.errors import AenvError, Internal, NotFound
from aenv_nodeagent.disks import flatten_onto, rebase_overlay
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.templates.model import (
    DISK_FILE,
    MEMORY_FILE,
    META_FILE,
    STATE_FILE,
    TemplateInputs,
    TemplateSnapshot,
    load_snapshot,
    snapshot_dir,
)
from aenv_nodeagent.templates.saved import SavedTemplates, inputs_from_json

log = logging.getLogger(__name__)

INPUTS_FILE = "inputs.json"
ROOTFS_FILE = "rootfs"
SNAPSHOT_FILES = (DISK_FILE, MEMORY_FILE, STATE_FILE, META_FILE)


# The node-side templates the cluster knows (their `templates/<id>` records).
Known = Callable[[], Awaitable[set[str]]]


async def cluster_templates(store: ClusterStore) -> set[str]:
    return {record.template_id for record in await store.list_templates()}


def inputs_manifest(template_id: str) -> str:
    return f"template-{template_id}"


def snapshot_manifest(template_id: str, key: str) -> str:
    return f"template-{template_id}-{key}"


class TemplateDistribution:
    def __init__(
        self, persistence: SnapshotPersistence, root: Path, saved: SavedTemplates
    ) -> None:
        self._persistence = persistence
        self._root = root
        self._saved = saved
        self._pulls: dict[str, asyncio.Task[TemplateInputs | None]] = {}

    def share_soon(self, inputs: TemplateInputs, snapshot: TemplateSnapshot) -> None:
        """Pushes a template built (and saved) here, in the background."""
        template_id = inputs.template_id
        saved = self._saved.path(template_id)
        labels = {"kind": "template", "template_id": template_id}

        async def inputs_files() -> dict[str, Path]:
            return {INPUTS_FILE: saved, ROOTFS_FILE: inputs.rootfs.path}

        flat = self._root / ".share" / f"{template_id}.qcow2"

        async def snapshot_files() -> dict[str, Path]:
            # Its disk stands on step layers only this node has: sent merged onto the rootfs.
            flat.parent.mkdir(parents=True, exist_ok=True)
            await flatten_onto(snapshot.disk, inputs.rootfs.path, flat)
            files = {name: snapshot.directory / name for name in SNAPSHOT_FILES}
            return {**files, DISK_FILE: flat}

        async def shared() -> None:
            log.info("template pushed to snapstore", extra={"template": template_id})

        async def snapshot_shared() -> None:
            flat.unlink(missing_ok=True)
            await shared()

        self._persistence.push_soon(inputs_manifest(template_id), inputs_files, shared, labels)
        self._persistence.push_soon(snapshot_manifest(template_id, inputs.key()), snapshot_files,
                                    snapshot_shared, labels)

    async def resume(self, saved: list[TemplateInputs], known: Known) -> list[str]:
        """Pushes again, in the background, the templates saved and captured here that this
        cluster knows (a `templates/<id>` record: never another cluster's sharing this folder,
        nor a retired one) and snapstore lacks — a stop cut their push short. Returns their
        ids; a store or etcd away is logged, and the next start tries again."""
        try:
            cluster, stored = await known(), await self._persistence.manifests()
        except AenvError as err:
            log.warning("template pushes not resumed", extra={"error": err.message})
            return []
        resumed = []
        for inputs in saved:
            template_id, key = inputs.template_id, inputs.key()
            wanted = {inputs_manifest(template_id), snapshot_manifest(template_id, key)}
            snapshot = load_snapshot(snapshot_dir(self._root, inputs))
            if template_id in cluster and not wanted <= stored and snapshot is not None:
                self.share_soon(inputs, snapshot)
                resumed.append(template_id)
        if resumed:
            log.info("template pushes resumed", extra={"templates": resumed})
        return resumed

    async def shared(self, template_id: str, key: str) -> None:
        """Waits for the template's pushes in flight (tests, and a node about to stop)."""
        await self._persistence.persisted(inputs_manifest(template_id))
        await self._persistence.persisted(snapshot_manifest(template_id, key))

    async def fetch(self, template_id: str) -> TemplateInputs | None:
        """The template's inputs, pulled (with its snapshot when it fits this node) and saved
        here; None when snapstore has no such template. Concurrent asks share one pull.

        :raise Internal: the stored template is inconsistent.
        """
        task = self._pulls.get(template_id)
        if task is None:
            task = asyncio.ensure_future(self._fetch(template_id))
            self._pulls[template_id] = task
            task.add_done_callback(lambda _: self._pulls.pop(template_id, None))
        return await asyncio.shield(task)

    async def _fetch(self, template_id: str) -> TemplateInputs | None:
        with self._staging() as staging:
            try:
                files = await self._persistence.pull(inputs_manifest(template_id),
                                                     staging / "inputs")
            except NotFound:
                return None
            data = json.loads(files[INPUTS_FILE].read_text())
            if data.get("template_id") != template_id:
                raise Internal(f"snapstore's template {template_id} names another template")
            rootfs = self._place_rootfs(data, files[ROOTFS_FILE])
            inputs = inputs_from_json(self._saved.defaults, data, rootfs)
            pulled_snapshot = await self._fetch_snapshot(inputs, staging / "snapshot")
            self._saved.save(inputs)
            log.info("template pulled from snapstore",
                     extra={"template": template_id, "with_snapshot": pulled_snapshot})
            return inputs

    def _place_rootfs(self, data: dict[str, object], pulled: Path) -> Path:
        recorded = Path(str(data["rootfs"]))
        if recorded.is_file():
            return recorded  # its path is keyed by its digest: this host holds it already
        target = self._root / "rootfs" / str(data["rootfs_digest"]).replace(":", "-")
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(pulled, target)
        return target

    async def fetch_snapshot(self, inputs: TemplateInputs) -> bool:
        """Pulls the captured snapshot of a template this node knows (evicted from its cache,
        say) when snapstore has one that fits; False when it has none."""
        with self._staging() as staging:
            return await self._fetch_snapshot(inputs, staging / "snapshot")

    @contextlib.contextmanager
    def _staging(self) -> Iterator[Path]:
        """A folder for a pull beside the templates (renames into place stay on one
        filesystem), gone afterwards."""
        self._root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=self._root))
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    async def _fetch_snapshot(self, inputs: TemplateInputs, dest: Path) -> bool:
        directory = snapshot_dir(self._root, inputs)
        if load_snapshot(directory) is not None:
            return True
        try:
            files = await self._persistence.pull(
                snapshot_manifest(inputs.template_id, inputs.key()), dest)
        except NotFound:
            return False  # captured under other artifacts: this node captures its own
        await rebase_overlay(files[DISK_FILE], inputs.rootfs.path)
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            dest.rename(directory)
        except OSError:
            if load_snapshot(directory) is None:  # not a concurrent pull that won: a real error
                raise
        return True
