"""Templates: what a sandbox starts from. Each is a rootfs (the built-in Debian `base`, or an
image) and a recipe, cold-booted once and captured, so sandboxes only ever restore.

- model.py: the inputs that shape a template and the snapshot made of them (pure)
- recipe.py: E2B's build steps, start and ready commands, as the SDKs send them (pure)
- steps.py: running a recipe in the build VM through its envd
- launch.py: starting a VM of a template (a restore's target or a cold boot): the one place
- store.py: this node's templates, each captured on first use
- bases.py, builds.py: templates built from OCI images or other templates (E2B's build)
- saved.py: the templates built or pulled here, known again after a restart
- distribution.py, guest_disks.py: templates through snapstore, so any node creates from
  them (the built-in ones' captures too), each capture with the disks it was made on
- cache.py, retire.py, outdated.py: bounding the captured ones; dropping those the catalog
  retired, and the built-in ones' captures under inputs this node no longer has
- bounds.py: bounding what builds leave (image blobs, base disks, step layers) and pulled rootfs
"""

from aenv_nodeagent.templates.model import (
    ROOT_DISK_ID,
    TOOLS_DISK_ID,
    TemplateInputs,
    TemplateSnapshot,
    load_snapshot,
    snapshot_dir,
    vm_spec,
)
from aenv_nodeagent.templates.store import TemplateStore

__all__ = [
    "ROOT_DISK_ID",
    "TOOLS_DISK_ID",
    "TemplateInputs",
    "TemplateSnapshot",
    "TemplateStore",
    "load_snapshot",
    "snapshot_dir",
    "vm_spec",
]
