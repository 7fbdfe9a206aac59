"""The templates of this node: each captured once, on first use, then only ever restored.

A capture boots the template's rootfs through the restore pipeline's cold boot
(`sandbox/vms.boot_from_disk`, its RAM a shared mapping of the snapshot's memory file), runs its
recipe (`steps.py`) when it has one, hands envd the defaults the recipe left and captures the
running VM — its start command's process included, so a sandbox's port answers at once. With a
snapstore, a capture another node pushed (`distribution.py`) is pulled instead when it fits this
node, and a built-in template's capture made or kept here is pushed for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from aenv_common.errors import AenvError, DeadlineExceeded
from aenv_nodeagent.artifacts.cache import file_lock
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import EgressPolicy, NetworkManager
from aenv_nodeagent.templates.distribution import BUILTIN_TEMPLATES, TemplateDistribution
from aenv_nodeagent.templates.launch import boot_from_disk
from aenv_nodeagent.templates.layers import BuildDisk, StepLayers, layer_keys
from aenv_nodeagent.templates.model import (
    DISK_FILE,
    MEMORY_FILE,
    META_FILE,
    STATE_FILE,
    TemplateCatalog,
    TemplateInputs,
    TemplateSnapshot,
    backed_inputs,
    load_snapshot,
    save_snapshot,
    snapshot_dir,
)
from aenv_nodeagent.templates.steps import (
    READY_TIMEOUT_S,
    BuildContexts,
    GuestDefaults,
    Log,
    StepRunner,
)
from aenv_nodeagent.vmm.driver import VmmDriver

log = logging.getLogger(__name__)

MARK_EVERY_S = 60.0

class TemplateStore(TemplateCatalog):
    """Builds template snapshots on first use and keeps the ones this node has."""

    def __init__(
        self,
        root: Path,
        network: NetworkManager,
        envd: EnvdClient,
        driver: VmmDriver,
        commands: GuestCommands,
        *,
        boot_timeout_s: float,
        boot_attempts: int,
        contexts: BuildContexts | None = None,
        remote: TemplateDistribution | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        super().__init__()
        self._root = root
        self._network = network
        self._envd = envd
        self._driver = driver
        self._commands = commands
        # COPY steps' files: local ones only, unless a snapstore-backed store is given.
        self._contexts = contexts or BuildContexts(root / "contexts")
        # Templates built on other nodes, pulled on first use.
        self._remote = remote
        self._ready_timeout_s = ready_timeout_s
        # The build VMs' disks after each step, reused by builds that begin alike.
        self._layers = StepLayers(root / "layers")
        self._boot_timeout_s = boot_timeout_s
        self._boot_attempts = boot_attempts
        self._ready: dict[str, TemplateSnapshot] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._marked: dict[Path, float] = {}  # snapshot folder -> when its use was written

    @property
    def root(self) -> Path:
        return self._root

    def cached(self) -> list[TemplateSnapshot]:
        return list(self._ready.values())

    async def get(
        self, template_id: str, build_log: Log | None = None, *, reuse_layers: bool = True
    ) -> TemplateSnapshot:
        """The template's snapshot, capturing it the first time (its build's lines go to
        `build_log`, else to this node's log; `reuse_layers=False`: every step runs, even
        those an earlier build's step layers hold).

        :raise NotFound: no such template registered.
        :raise BuildStepFailed: a step of its recipe failed.
        :raise DeadlineExceeded: its guest never answered, every attempt.
        """
        if snap := self._ready.get(template_id):
            self._mark_used(snap)
            return snap
        if not self.has(template_id) and self._remote is not None:
            if (pulled := await self._remote.fetch(template_id)) is not None:
                self.register(pulled)
        inputs = self.inputs(template_id)
        async with self._locks.setdefault(template_id, asyncio.Lock()):
            if snap := self._ready.get(template_id):
                return snap
            directory = snapshot_dir(self._root, inputs)
            directory.parent.mkdir(parents=True, exist_ok=True)
            lock = directory.parent / f".{directory.name}.lock"
            try:
                async with file_lock(lock):
                    snap = await self._local_or_pulled(inputs, directory) or await self._build(
                        inputs, directory, build_log or _build_log(inputs), reuse_layers)
            except BaseException:
                _drop_if_unused(lock)  # a failed first capture leaves nothing behind
                raise
            self._ready[template_id] = snap
            if self._remote is not None:  # other nodes need not capture it again
                self._remote.share_builtin_soon(self.inputs(template_id), snap)
        self._mark_used(snap)
        return snap

    def _mark_used(self, snapshot: TemplateSnapshot) -> None:
        """Its use time, for the cache's least-recently-used order (the snapshot's
        `template.json` mtime: it survives restarts). Written at most once a minute: every
        create passes here, and the cache never evicts what was used in the last minutes."""
        now = time.monotonic()
        if now - self._marked.get(snapshot.directory, -MARK_EVERY_S) < MARK_EVERY_S:
            return
        self._marked[snapshot.directory] = now
        with contextlib.suppress(OSError):
            os.utime(snapshot.directory / META_FILE)

    async def _local_or_pulled(
        self, inputs: TemplateInputs, directory: Path
    ) -> TemplateSnapshot | None:
        if (snap := load_snapshot(directory)) is None and self._remote is not None:
            if inputs.template_id in BUILTIN_TEMPLATES:
                await self._remote.fetch_builtin(inputs)
            else:
                await self._remote.fetch_snapshot(inputs)
            snap = load_snapshot(directory)
        if snap is not None:
            # A built-in capture pulled with the disks it was made on: restores use those.
            self.register(backed_inputs(inputs, directory))
        return snap

    def on_disk(self) -> list[TemplateSnapshot]:
        """Every captured template snapshot under this store's folder (also ones not loaded
        since the node started)."""
        found = []
        for meta in sorted(self._root.glob(f"*/*/{META_FILE}")):
            if (snap := load_snapshot(meta.parent)) is not None:
                found.append(snap)
        return found

    def drop_captured(self, snapshot: TemplateSnapshot) -> None:
        """Removes a captured snapshot (the cache's eviction); the template stays registered,
        so its next use pulls or captures it again."""
        if (ready := self._ready.get(snapshot.template_id)) is not None and \
                ready.directory == snapshot.directory:
            del self._ready[snapshot.template_id]
        shutil.rmtree(snapshot.directory, ignore_errors=True)

    async def _build(
        self, inputs: TemplateInputs, directory: Path, build_log: Log, reuse_layers: bool
    ) -> TemplateSnapshot:
        last: AenvError | None = None
        for attempt in range(1, self._boot_attempts + 1):
            work = Path(tempfile.mkdtemp(prefix=".build-", dir=directory.parent))
            try:
                snap = await self._capture(inputs, work, directory, build_log, reuse_layers)
                save_snapshot(snap, work)
                work.rename(directory)
                log.info("template captured", extra={"template": inputs.template_id,
                                                     "boot_s": round(snap.boot_seconds, 2)})
                return snap
            except DeadlineExceeded as err:
                # ~3 in 20 TCG cold boots hang silently: a fresh boot usually succeeds.
                last = err
                log.warning("template boot timed out, retrying",
                            extra={"template": inputs.template_id, "attempt": attempt})
            finally:
                shutil.rmtree(work, ignore_errors=True)
        assert last is not None
        raise last

    async def _capture(
        self, inputs: TemplateInputs, work: Path, final_dir: Path, build_log: Log,
        reuse_layers: bool,
    ) -> TemplateSnapshot:
        keys = layer_keys(inputs) if inputs.recipe else []
        cached = (self._layers.newest_cached(keys, inputs.rootfs.path)
                  if keys and reuse_layers else None)
        await create_overlay(cached[1].disk if cached else inputs.rootfs.path, work / DISK_FILE)
        # A recipe's RUN steps fetch packages: the internet, never the host or private ranges.
        slot = await self._network.create_slot(EgressPolicy())
        vm = None
        disk: BuildDisk | None = None
        try:
            started = time.monotonic()
            vm = await boot_from_disk(self._driver, inputs, work, slot, DISK_FILE,
                                      work / MEMORY_FILE, keep_ram=True)
            await self._envd.wait_healthy(slot.ns_ip, self._boot_timeout_s)
            boot_seconds = time.monotonic() - started
            defaults = GuestDefaults()
            if inputs.recipe:
                disk = BuildDisk(vm, self._layers, work, inputs.rootfs.path)

                async def checkpoint(number: int, now: GuestDefaults) -> None:
                    await disk.freeze(keys[number], now)

                defaults = await StepRunner(
                    self._commands, slot.ns_ip, self._contexts, build_log,
                    self._ready_timeout_s).run(
                        inputs.recipe, checkpoint=checkpoint,
                        resume=(cached[0], cached[1].defaults) if cached else None)
            # The recipe's ENV (and the image's) held for its steps, start and ready commands
            # only: as E2B's, a sandbox's later commands get the user and workdir, not them.
            envd_version = await self._envd.init(
                slot.ns_ip, env_vars={}, access_token="",
                default_user=defaults.user, default_workdir=defaults.workdir)
            await vm.capture(work / STATE_FILE)
        finally:
            if vm is not None:
                await vm.shutdown()
            await self._network.destroy_slot(slot)
        if disk is not None:
            disk.settle()
        shutil.rmtree(work / "vm", ignore_errors=True)
        return TemplateSnapshot(
            template_id=inputs.template_id,
            directory=final_dir,
            vcpus=inputs.vcpus,
            memory_mib=inputs.memory_mib,
            disk_mib=inputs.disk_mib,
            accelerator=str(inputs.accel.accel),
            kernel_version=inputs.artifacts.kernel_version,
            artifacts_digest=inputs.artifacts.digest,
            envd_version=envd_version,
            boot_seconds=boot_seconds,
            default_user=defaults.user,
            default_workdir=defaults.workdir,
        )


def _drop_if_unused(lock: Path) -> None:
    """The template's folder, when it holds nothing but locks (no other snapshot, no capture
    under way: those keep their files and `.build-*` folders there)."""
    folder = lock.parent
    if all(path.name.endswith(".lock") for path in folder.iterdir()):
        shutil.rmtree(folder, ignore_errors=True)


def _build_log(inputs: TemplateInputs) -> Log:
    def write(line: str, step: str = "", /) -> None:
        log.info("template build",
                 extra={"template": inputs.template_id, "step": step, "line": line[:500]})
    return write
