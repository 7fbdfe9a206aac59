"""Step layers of template builds: the build VM's disk frozen after E2B's configure phase and
after each step, kept by a key of everything before it (rootfs, tools, the image's settings, the
steps so far), with the user, working directory and environment the steps left.

A build whose first steps match an earlier build's (a rebuild with one step changed, a template
built on another: its parent's steps come first) boots on the newest matching layer and runs
only the steps after it; `force` (the SDK's skip_cache) runs them all. A layer is the former top
overlay of the build VM, hard-linked into `<root>/` as the VM goes on in a new overlay over it
(the sandboxes' own disk layers work the same way): each layer's qcow2 header names the one
below it, the first names the rootfs. A layer file is never replaced (templates stand on it):
a key built again gets a new file, and its index (`<key>.json`) names the newest.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from aenv_nodeagent.artifacts.cache import CacheKey
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.templates.bounds import mark_used
from aenv_nodeagent.templates.layer_index_file import LAYER_INDEX_FORMAT
from aenv_nodeagent.templates.model import DISK_FILE, ROOT_NODE, TemplateInputs
from aenv_nodeagent.templates.steps import GuestDefaults
from aenv_nodeagent.vmm import Vm


@dataclass(frozen=True)
class StepLayer:
    key: str
    disk: Path
    # What the steps up to it left for the next ones.
    defaults: GuestDefaults


def layer_keys(inputs: TemplateInputs) -> list[str]:
    """The key after the configure phase, then after each step: keys[i] is the disk once
    steps 1..i ran."""
    recipe = inputs.recipe
    key = (CacheKey("step-layer")
           .add("rootfs", inputs.rootfs.digest)
           .add("tools", inputs.artifacts.digest)
           .add("image", json.dumps([recipe.from_image, list(recipe.image_env),
                                     recipe.image_workdir])))
    keys = [key.hexdigest()[:32]]
    for step in recipe.steps:
        key = CacheKey("step-layer").add("below", keys[-1]).add(
            "step", json.dumps([step.kind, list(step.args), step.files_hash]))
        keys.append(key.hexdigest()[:32])
    return keys


class StepLayers:
    def __init__(self, root: Path) -> None:
        self._root = root

    def new_disk(self, key: str) -> Path:
        """Where a new layer of `key` goes (its file does not exist yet)."""
        self._root.mkdir(parents=True, exist_ok=True)
        return self._root / f"{key}-{secrets.token_hex(4)}.qcow2"

    def newest_cached(self, keys: list[str], rootfs: Path) -> tuple[int, StepLayer] | None:
        """The last of `keys` kept over this rootfs, and its index; None when not even the
        configure phase's is."""
        found = None
        for index, key in enumerate(keys):
            layer = self._find(key, rootfs)
            if layer is None:
                break
            found = (index, layer)
        return found

    def index(self, key: str, disk: Path, defaults: GuestDefaults, rootfs: Path) -> StepLayer:
        """Record `disk` (linked in) as the newest layer of `key`."""
        LAYER_INDEX_FORMAT.write(
            self._root / f"{key}.json",
            {"disk": disk.name, "defaults": asdict(defaults), "rootfs": str(rootfs)}, mode=0o644)
        return StepLayer(key, disk, defaults)

    def _find(self, key: str, rootfs: Path) -> StepLayer | None:
        meta = self._root / f"{key}.json"
        if not meta.is_file():
            return None
        data = LAYER_INDEX_FORMAT.read(meta)
        disk = self._root / str(data["disk"])
        if data.get("rootfs") != str(rootfs) or not disk.is_file():
            return None
        mark_used(disk)  # a build boots on it: the node's bound keeps it (bounds.py)
        return StepLayer(key, disk, GuestDefaults(**data["defaults"]))


class BuildDisk:
    """The build VM's disk: its top overlay and block node, frozen into a step layer."""

    def __init__(self, vm: Vm, layers: StepLayers, work: Path, rootfs: Path) -> None:
        self._vm = vm
        self._layers = layers
        self._work = work
        self._rootfs = rootfs
        self.active = work / DISK_FILE
        self._node = ROOT_NODE
        self._frozen = 0

    async def freeze(self, key: str, defaults: GuestDefaults) -> StepLayer:
        """Freeze the top overlay as the layer of `key`; the VM goes on in a new one over it.
        Call after the guest synced its filesystems."""
        disk = self._layers.new_disk(key)
        following = self._work / f"disk-{self._frozen + 1}.qcow2"
        new_node = f"step{self._frozen + 1}"
        await create_overlay(disk, following, like=self.active)
        os.link(self.active, disk)
        await self._vm.pause()
        try:
            await self._vm.switch_disk_to_overlay(self._node, new_node, following)
        except BaseException:
            disk.unlink(missing_ok=True)
            following.unlink(missing_ok=True)
            raise
        finally:
            await self._vm.resume()
        self.active, self._node = following, new_node
        self._frozen += 1
        return self._layers.index(key, disk, defaults, self._rootfs)

    def settle(self) -> None:
        """Once the VM is gone: its top overlay becomes the template's disk file."""
        if self.active.name != DISK_FILE:
            os.replace(self.active, self._work / DISK_FILE)
