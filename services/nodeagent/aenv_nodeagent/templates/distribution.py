"""Templates in snapstore, so any node creates from a template built on another without building
it again. Two manifests per template:

- `template-<id>`: what makes it — its saved inputs (saved.py) and its rootfs;
- `template-<id>-<key>`: its captured snapshot (frozen disk layer, RAM, device state), for the
  nodes whose inputs key matches — the same guest artifacts, accelerator, kernel and size. The
  digests of the disks under it (rootfs, tools disk) go with it (`disks.json`, and its labels):
  the restored guest's page cache holds their blocks, so a node whose tools disk has other
  bytes (the artifact builds are not reproducible) restores it on the pusher's, pushed beside it
  as `guest-disk-<sha256>` (guest_disks.py).

A push a node stop cut short is pushed again when the node starts (`resume`).

A node asked for a template it does not know pulls the first, places the rootfs (kept by digest;
one this host already holds is used as it is), then the second when its key matches, its disk
layer re-pointed at the local rootfs. Without a matching snapshot the template is captured here
from its inputs on first use, as on the node that built it. Pushes run in the background with
the snapshot persistence's retries, at a low CPU priority (a fresh node's ~1 GB of start-up
pushes must not slow its creates); chunks the store has are not sent again.

The built-in templates (`base`, `code-interpreter-v1`) every node makes from its own artifacts:
only their captures travel, as `template-<id>-<key>` with the digests of the rootfs and tools
disk under the captured guest, and those disks beside them (guest_disks.py: the builds are not
reproducible). A node that captured one, or holds one snapstore lacks, pushes it; a node without
one pulls it, with any disk whose bytes it lacks, and restores on those (its `backing.json`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path

from aenv_common.cluster import ClusterStore
from aenv_common.errors import AenvError, Internal, NotFound
from aenv_nodeagent.disks import flatten_onto, rebase_overlay
from aenv_nodeagent.snapshots.persistence import PUSHES_PENDING, SnapshotPersistence
from aenv_nodeagent.templates.bounds import mark_used
from aenv_nodeagent.templates.code_interpreter import CODE_INTERPRETER_TEMPLATE
from aenv_nodeagent.templates.disk_files import (
    DISKS_FILE,
    read_digests,
    write_backing,
    write_digests,
)
from aenv_nodeagent.templates.guest_disks import GuestDisks, disk_digests, disk_paths
from aenv_nodeagent.templates.inputs_file import read_inputs
from aenv_nodeagent.templates.model import (
    BASE_TEMPLATE,
    DISK_FILE,
    MEMORY_FILE,
    META_FILE,
    PULLED_ROOTFS_DIR,
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
# Every node makes these from its own artifacts: only their captures travel, with their disks.
BUILTIN_TEMPLATES = frozenset({BASE_TEMPLATE, CODE_INTERPRETER_TEMPLATE})


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
        self._offered: set[Path] = set()  # built-in captures checked against snapstore this run
        self._offers: set[asyncio.Task[str | None]] = set()
        self._disks = GuestDisks(persistence, root)

    def share_soon(self, inputs: TemplateInputs, snapshot: TemplateSnapshot) -> None:
        """Pushes a template built (and saved) here, in the background: its inputs and rootfs,
        its capture and the tools disk under it."""
        template_id = inputs.template_id
        saved = self._saved.path(template_id)
        labels = {"kind": "template", "template_id": template_id}

        async def inputs_files() -> dict[str, Path]:
            return {INPUTS_FILE: saved, ROOTFS_FILE: inputs.rootfs.path}

        async def shared() -> None:
            log.info("template pushed to snapstore", extra={"template": template_id})

        self._persistence.push_soon(inputs_manifest(template_id), inputs_files, shared, labels)
        self._offer_soon(self._offer_capture(inputs, snapshot, shared, ("tools_disk",)))

    def _offer_soon(self, offer: Coroutine[None, None, str | None]) -> None:
        task = asyncio.ensure_future(offer)
        self._offers.add(task)
        PUSHES_PENDING.inc()  # its pushes count from when they start: no gap between
        task.add_done_callback(self._offers.discard)
        task.add_done_callback(lambda _: PUSHES_PENDING.dec())

    async def _offer_capture(
        self, inputs: TemplateInputs, snapshot: TemplateSnapshot,
        shared: Callable[[], Awaitable[None]], disk_names: tuple[str, ...],
        unless_stored: bool = False,
    ) -> str | None:
        """Pushes the capture as `template-<id>-<key>` after the disks of `disk_names` under it
        that snapstore lacks (unless it has the capture, with `unless_stored`); returns the
        capture's manifest when pushed. Its labels name its disks' digests (GuestDisks.collect).
        """
        manifest = snapshot_manifest(inputs.template_id, inputs.key())
        try:
            digests, stored = await disk_digests(inputs), await self._persistence.manifests()
        except (AenvError, OSError) as err:  # a start's resume offers it again
            log.warning("template capture not pushed",
                        extra={"template": inputs.template_id, "error": str(err)})
            return None
        disks = self._disks.push_soon(inputs, digests, stored, disk_names)
        if unless_stored and manifest in stored:
            return None  # any disks it lacked go: its pusher's may have been lost
        self._push_capture(inputs, snapshot, manifest, shared, after=disks, more_labels=digests)
        return manifest

    def _push_capture(
        self, inputs: TemplateInputs, snapshot: TemplateSnapshot, manifest: str,
        shared: Callable[[], Awaitable[None]], after: Sequence[str] = (),
        more_labels: Mapping[str, str] | None = None,
    ) -> None:
        """Pushes a captured snapshot as `manifest`, with the digests of the disks under it,
        once the pushes of the manifests `after` are done."""
        share = self._root / ".share"
        flat, disks = share / f"{manifest}.qcow2", share / f"{manifest}.{DISKS_FILE}"

        async def files() -> dict[str, Path]:
            for earlier in after:
                await self._persistence.persisted(earlier)
            # Its disk stands on step layers only this node has: sent merged onto the rootfs.
            share.mkdir(parents=True, exist_ok=True)
            await flatten_onto(snapshot.disk, inputs.rootfs.path, flat)
            await asyncio.to_thread(write_digests, disks, await disk_digests(inputs))
            files = {name: snapshot.directory / name for name in SNAPSHOT_FILES}
            return {**files, DISK_FILE: flat, DISKS_FILE: disks}

        async def pushed() -> None:
            flat.unlink(missing_ok=True)
            disks.unlink(missing_ok=True)
            await shared()

        labels = {"kind": "template", "template_id": inputs.template_id, **(more_labels or {})}
        self._persistence.push_soon(manifest, files, pushed, labels)

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
        await asyncio.gather(*self._offers)
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
            data = read_inputs(files[INPUTS_FILE])
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
        target = self._root / PULLED_ROOTFS_DIR / str(data["rootfs_digest"]).replace(":", "-")
        if target.is_file():
            mark_used(target)  # its bound keeps the recently used ones (bounds.py)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            pulled.chmod(0o444)  # a backing file, pulled private (mkstemp): read-only for all
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
            return await self._place_snapshot(files, inputs, dest) is not None
        except NotFound:
            return False  # captured under other artifacts: this node captures its own
        except (Internal, KeyError, ValueError) as err:  # a broken push: captured here too
            log.warning("template capture not pulled: captured here instead",
                        extra={"template": inputs.template_id, "error": str(err)})
            return False

    async def _place_snapshot(
        self, files: Mapping[str, Path], inputs: TemplateInputs, pulled: Path
    ) -> TemplateInputs | None:
        """A pulled snapshot folder moved into place, standing on the disks it was captured
        on: this node's own where their bytes are alike, else pulled beside it (guest_disks.py;
        its `backing.json` names them); returns the template on those disks. None, and nothing
        placed, when snapstore lacks one (a base disk made here again from the same image is
        not the same bytes, and a built template's rootfs travels with its inputs only).

        :raise OSError: this node's disks cannot be read.
        :raise Internal: a pulled disk is not the bytes it was pulled as.
        """
        on = inputs
        if (recorded := files.get(DISKS_FILE)) is not None:  # older pushes carry none
            try:
                on = await self._disks.adopt(inputs, read_digests(recorded),
                                             pulled.parent)
            except NotFound:
                log.info("template capture made on disks snapstore lacks: captured here instead",
                         extra={"template": inputs.template_id})
                return None
            recorded.unlink()
        if on != inputs:
            write_backing(pulled, disk_paths(on))
        await rebase_overlay(files[DISK_FILE], on.rootfs.path)
        for path in files.values():  # pulled private (mkstemp): read as a capture made here
            if path.exists():
                path.chmod(0o644)
        directory = snapshot_dir(self._root, inputs)
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            pulled.rename(directory)
        except OSError:
            if load_snapshot(directory) is None:  # not a concurrent pull that won: a real error
                raise
        return on

    # --- built-in templates --------------------------------------------------------------------

    def share_builtin_soon(self, inputs: TemplateInputs, snapshot: TemplateSnapshot) -> None:
        """Pushes, in the background, a built-in template's capture this node holds and the
        disks under it, unless snapstore has them for these inputs already (another node's: two
        nodes that capture at once both push the same name, and either capture serves, its
        disks beside it). Checked once a run; other templates are not built-in: ignored."""
        if inputs.template_id not in BUILTIN_TEMPLATES or snapshot.directory in self._offered:
            return
        self._offered.add(snapshot.directory)

        async def shared() -> None:
            log.info("built-in template capture pushed to snapstore", extra={
                "template": inputs.template_id, "key": inputs.key()})

        self._offer_soon(self._offer_capture(inputs, snapshot, shared,
                                             ("rootfs", "tools_disk"), unless_stored=True))

    async def builtins_shared(self) -> None:
        """Waits for the built-in captures' checks and pushes in flight (tests, benchmarks)."""
        for manifest in await asyncio.gather(*self._offers):
            if manifest is not None:
                await self._persistence.persisted(manifest)

    async def fetch_builtin(self, inputs: TemplateInputs) -> TemplateInputs | None:
        """Pulls a built-in template's capture another node made, with the disks it was made
        on that this node lacks; returns the template on those disks (the capture's
        `backing.json` names them when they are not this node's own). None when snapstore
        has none, or its pull fails: the caller captures its own."""
        started = time.monotonic()
        try:
            with self._staging() as staging:
                dest = staging / "snapshot"
                files = await self._persistence.pull(
                    snapshot_manifest(inputs.template_id, inputs.key()), dest)
                if DISKS_FILE not in files:
                    raise Internal("the stored capture names no disks")
                if (on := await self._place_snapshot(files, inputs, dest)) is None:
                    return None
        except NotFound:
            return None
        except (AenvError, OSError, KeyError, ValueError) as err:
            log.warning("built-in template capture not pulled: captured here instead",
                        extra={"template": inputs.template_id, "error": str(err)})
            return None
        log.info("built-in template capture pulled from snapstore", extra={
            "template": inputs.template_id, "pull_s": round(time.monotonic() - started, 2),
            "own_disks": on == inputs})
        return on
