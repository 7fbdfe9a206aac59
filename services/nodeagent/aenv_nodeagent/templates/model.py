"""What a template is: the inputs that shape it and the snapshot made of them.

A template snapshot is a directory, keyed by everything that shapes it (guest artifacts, rootfs,
build recipe, accelerator, VM size), holding the frozen disk layer, the guest RAM file, the device
state and `template.json` (this module's TemplateSnapshot, with the defaults the recipe left for
the sandboxes: user, working directory, environment). Restoring requires the same accelerator and
kernel: both are in the key, so a node never restores a snapshot taken under another one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aenv_common.errors import NotFound
from aenv_nodeagent.artifacts import GuestArtifacts, RootfsImage
from aenv_nodeagent.artifacts.cache import CacheKey
from aenv_nodeagent.templates.disk_files import read_backing
from aenv_nodeagent.templates.recipe import Recipe
from aenv_nodeagent.templates.template_file import STALE_DIRECTORY, TEMPLATE_FILE
from aenv_nodeagent.vmm import AcceleratorChoice, DiskSpec, NetSpec, VmSpec
from aenv_nodeagent.vmm.argv import block_node_name

# The built-in template every node captures at start from its own artifacts.
BASE_TEMPLATE = "base"
ROOT_DISK_ID = "root"
TOOLS_DISK_ID = "tools"
# A template snapshot's files: its frozen disk layer and its guest RAM.
DISK_FILE = "disk.qcow2"
MEMORY_FILE = "memory"
STATE_FILE = "state"
META_FILE = "template.json"  # templates/template_file.py
# Where a node keeps the rootfs of templates pulled from snapstore, by digest (under its
# templates folder).
PULLED_ROOTFS_DIR = "rootfs"
# The root disk's block node in a freshly launched VM (vm_spec): a template's build VM and every
# sandbox's; overlays added later get other names.
ROOT_NODE = block_node_name(DiskSpec(ROOT_DISK_ID, Path(DISK_FILE), "qcow2", readonly=False))
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
    # What the recipe's USER and WORKDIR steps left: every sandbox's envd /init gets them. Its
    # ENV steps hold during the build only (E2B's `set_envs`); env_vars stays empty (kept for
    # the metadata of captures made before).
    default_user: str = "user"
    default_workdir: str = "/home/user"
    env_vars: dict[str, str] = field(default_factory=dict)

    @property
    def disk(self) -> Path:
        return self.directory / DISK_FILE

    @property
    def memory(self) -> Path:
        return self.directory / MEMORY_FILE

    @property
    def state(self) -> Path:
        return self.directory / STATE_FILE


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
    # The E2B build steps and start command run on the rootfs before the capture; none for
    # the built-in `base`.
    recipe: Recipe = field(default_factory=Recipe)
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
            .add("recipe", self.recipe.digest())
            .hexdigest()[:24]
        )


def with_disks(inputs: TemplateInputs, rootfs: Path, tools_disk: Path) -> TemplateInputs:
    """The same template on other files of the same content kind (its key does not change)."""
    return dataclasses.replace(
        inputs, rootfs=dataclasses.replace(inputs.rootfs, path=rootfs),
        artifacts=dataclasses.replace(inputs.artifacts, tools_disk=tools_disk))


def backed_inputs(inputs: TemplateInputs, directory: Path) -> TemplateInputs:
    """`inputs` on the disks the snapshot in `directory` was captured on (its `backing.json`:
    templates/disk_files.py), else as they are."""
    if (backing := read_backing(directory)) is None:
        return inputs
    return with_disks(inputs, backing["rootfs"], backing["tools_disk"])


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
        preload_library=inputs.preload_library,
    )


class TemplateCatalog:
    """The templates a node knows, by id: what shapes each (its inputs), captured or not."""

    def __init__(self) -> None:
        self._inputs: dict[str, TemplateInputs] = {}

    def register(self, inputs: TemplateInputs) -> None:
        self._inputs[inputs.template_id] = inputs

    def unregister(self, template_id: str, previous: TemplateInputs | None = None) -> None:
        """Forget the template, or put `previous` back (a failed rebuild keeps what was)."""
        if previous is None:
            self._inputs.pop(template_id, None)
        else:
            self._inputs[template_id] = previous

    def has(self, template_id: str) -> bool:
        return template_id in self._inputs

    def inputs(self, template_id: str) -> TemplateInputs:
        """:raise NotFound: no such template."""
        try:
            return self._inputs[template_id]
        except KeyError:
            raise NotFound(f"template '{template_id}' not found") from None

    def registered(self) -> list[str]:
        return list(self._inputs)


def snapshot_dir(root: Path, inputs: TemplateInputs) -> Path:
    return root / inputs.template_id / inputs.key()


def save_snapshot(snapshot: TemplateSnapshot, directory: Path) -> None:
    document = asdict(snapshot)
    del document[STALE_DIRECTORY]
    TEMPLATE_FILE.write(directory / META_FILE, document, mode=0o644)


def load_snapshot(directory: Path) -> TemplateSnapshot | None:
    meta = directory / META_FILE
    if not meta.is_file():
        return None
    data = TEMPLATE_FILE.read(meta)
    data[STALE_DIRECTORY] = directory
    return TemplateSnapshot(**data)
