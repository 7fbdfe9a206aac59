"""Templates: a base image cold-booted once and captured, so sandboxes only ever restore.

A template snapshot is a directory, keyed by everything that shapes it (guest artifacts, rootfs,
accelerator, VM size), holding the frozen disk layer, the guest RAM file and the device state.
Restoring requires the same accelerator and kernel: both are in the key, so a node never restores
a snapshot taken under another one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from aenv_common.errors import AenvError, DeadlineExceeded, NotFound
from aenv_nodeagent.artifacts import GuestArtifacts, RootfsImage
from aenv_nodeagent.artifacts.cache import CacheKey, file_lock
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import EgressPolicy, NetworkManager, netns_exec_prefix
from aenv_nodeagent.vmm import AcceleratorChoice, DiskSpec, NetSpec, QemuVm, VmSpec

log = logging.getLogger(__name__)

ROOT_DISK_ID = "root"
TOOLS_DISK_ID = "tools"
_META = "template.json"
# The guest gives the pages it frees back to the host (restored VMs: see vmm/seccomp.py).
FREE_PAGE_REPORTING = True


@dataclass(frozen=True)
class TemplateSnapshot:
    template_id: str
    directory: Path
    vcpus: int
    memory_mib: int
    disk_mib: int
    accelerator: str
    kernel_version: str
    artifacts_digest: str
    envd_version: str
    boot_seconds: float

    @property
    def disk(self) -> Path:
        return self.directory / "disk.qcow2"

    @property
    def memory(self) -> Path:
        return self.directory / "memory"

    @property
    def state(self) -> Path:
        return self.directory / "state"


@dataclass(frozen=True)
class TemplateInputs:
    template_id: str
    artifacts: GuestArtifacts
    rootfs: RootfsImage
    accel: AcceleratorChoice
    vcpus: int
    memory_mib: int
    disk_mib: int
    tcg_tb_mib: int
    # Preloaded into every VM that maps its RAM copy-on-write (vmm/dirtylog.py); not a part of
    # what a snapshot is made of, so not in the key.
    preload_library: Path | None = None

    def key(self) -> str:
        return (
            CacheKey("template-snapshot")
            .add("template", self.template_id)
            .add("artifacts", self.artifacts.digest)
            .add("rootfs", self.rootfs.digest)
            .add("accel", str(self.accel.accel))
            .add("kernel_override", str(self.accel.kernel_override or ""))
            .add("size", f"{self.vcpus}/{self.memory_mib}")
            .add("free_page_reporting", str(FREE_PAGE_REPORTING))
            .hexdigest()[:24]
        )


def vm_spec(
    inputs: TemplateInputs, root_disk: Path, mem_path: Path, *, mem_shared: bool,
    root_by_fd: bool = False,
) -> VmSpec:
    """The one VM shape shared by a template's cold boot and every restore of it: device state
    only restores into an identical device set."""
    return VmSpec(
        vcpus=inputs.vcpus,
        memory_mib=inputs.memory_mib,
        kernel=inputs.artifacts.kernel,
        initrd=inputs.artifacts.initrd,
        cmdline=inputs.artifacts.cmdline,
        disks=(
            DiskSpec(ROOT_DISK_ID, root_disk, "qcow2", readonly=False, by_fd=root_by_fd),
            DiskSpec(TOOLS_DISK_ID, inputs.artifacts.tools_disk, "raw", readonly=True),
        ),
        net=NetSpec(),
        mem_path=mem_path,
        mem_shared=mem_shared,
        accel=inputs.accel,
        tcg_tb_mib=inputs.tcg_tb_mib,
        free_page_reporting=FREE_PAGE_REPORTING,
        preload_library=None if mem_shared else inputs.preload_library,
    )


def snapshot_dir(root: Path, inputs: TemplateInputs) -> Path:
    return root / inputs.template_id / inputs.key()


class TemplateStore:
    """Builds template snapshots on first use and keeps the ones this node has."""

    def __init__(
        self,
        root: Path,
        network: NetworkManager,
        envd: EnvdClient,
        *,
        boot_timeout_s: float,
        boot_attempts: int,
    ) -> None:
        self._root = root
        self._network = network
        self._envd = envd
        self._boot_timeout_s = boot_timeout_s
        self._boot_attempts = boot_attempts
        self._inputs: dict[str, TemplateInputs] = {}
        self._ready: dict[str, TemplateSnapshot] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def register(self, inputs: TemplateInputs) -> None:
        self._inputs[inputs.template_id] = inputs

    def has(self, template_id: str) -> bool:
        return template_id in self._inputs

    def inputs(self, template_id: str) -> TemplateInputs:
        try:
            return self._inputs[template_id]
        except KeyError:
            raise NotFound(f"template '{template_id}' not found") from None

    def registered(self) -> list[str]:
        return list(self._inputs)

    def cached(self) -> list[TemplateSnapshot]:
        return list(self._ready.values())

    async def get(self, template_id: str) -> TemplateSnapshot:
        """The template's snapshot, cold-booting and capturing it the first time."""
        if snap := self._ready.get(template_id):
            return snap
        inputs = self.inputs(template_id)
        async with self._locks.setdefault(template_id, asyncio.Lock()):
            if snap := self._ready.get(template_id):
                return snap
            directory = snapshot_dir(self._root, inputs)
            directory.parent.mkdir(parents=True, exist_ok=True)
            async with file_lock(directory.parent / f".{directory.name}.lock"):
                snap = load_snapshot(directory) or await self._build(inputs, directory)
            self._ready[template_id] = snap
            return snap

    async def _build(self, inputs: TemplateInputs, directory: Path) -> TemplateSnapshot:
        directory.parent.mkdir(parents=True, exist_ok=True)
        last: AenvError | None = None
        for attempt in range(1, self._boot_attempts + 1):
            work = Path(tempfile.mkdtemp(prefix=".build-", dir=directory.parent))
            try:
                snap = await self._boot_and_capture(inputs, work, directory)
                (work / _META).write_text(json.dumps(asdict(snap), default=str))
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

    async def _boot_and_capture(
        self, inputs: TemplateInputs, work: Path, final_dir: Path
    ) -> TemplateSnapshot:
        disk = work / "disk.qcow2"
        await create_overlay(inputs.rootfs.path, disk)
        slot = await self._network.create_slot(EgressPolicy())
        vm: QemuVm | None = None
        try:
            started = time.monotonic()
            vm = await QemuVm.launch(
                vm_spec(inputs, disk, work / "memory", mem_shared=True),
                work / "vm",
                incoming=False,
                argv_prefix=netns_exec_prefix(slot),
                console_log=work / "console.log",
            )
            await self._envd.wait_healthy(slot.ns_ip, self._boot_timeout_s)
            boot_seconds = time.monotonic() - started
            envd_version = await self._envd.init(slot.ns_ip, env_vars={}, access_token="")
            await vm.capture(work / "state")
        finally:
            if vm is not None:
                await vm.shutdown()
            await self._network.destroy_slot(slot)
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
        )


def load_snapshot(directory: Path) -> TemplateSnapshot | None:
    meta = directory / _META
    if not meta.is_file():
        return None
    data = json.loads(meta.read_text())
    data["directory"] = directory
    return TemplateSnapshot(**data)
