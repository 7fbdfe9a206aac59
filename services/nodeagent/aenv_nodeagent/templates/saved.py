"""The templates a node built or pulled, kept as one JSON file each (`<id>.json`: rootfs path
and digest, recipe, VM size) so it knows them again after a restart and can hand them to
another node through snapstore (distribution.py). The node's artifacts, accelerator and
defaults complete them at load."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.templates.inputs_file import read_inputs, write_inputs
from aenv_nodeagent.templates.model import TemplateInputs
from aenv_nodeagent.templates.recipe import Recipe


def inputs_to_json(inputs: TemplateInputs) -> dict[str, Any]:
    return {
        "template_id": inputs.template_id, "rootfs": str(inputs.rootfs.path),
        "rootfs_digest": inputs.rootfs.digest, "recipe": inputs.recipe.to_json(),
        "vcpus": inputs.vcpus, "memory_mib": inputs.memory_mib, "disk_mib": inputs.disk_mib,
    }


def inputs_from_json(
    defaults: TemplateInputs, data: dict[str, Any], rootfs: Path | None = None
) -> TemplateInputs:
    """`rootfs`: where this node keeps the rootfs, when not at the recorded path."""
    return dataclasses.replace(
        defaults, template_id=data["template_id"],
        rootfs=RootfsImage(rootfs or Path(data["rootfs"]), data["rootfs_digest"], ()),
        recipe=Recipe.from_json(data["recipe"]), vcpus=data["vcpus"],
        memory_mib=data["memory_mib"], disk_mib=data["disk_mib"])


class SavedTemplates:
    def __init__(self, directory: Path, defaults: TemplateInputs) -> None:
        self._directory = directory
        self._defaults = defaults

    @property
    def defaults(self) -> TemplateInputs:
        return self._defaults

    def path(self, template_id: str) -> Path:
        return self._directory / f"{template_id}.json"

    def save(self, inputs: TemplateInputs) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        write_inputs(self.path(inputs.template_id), inputs_to_json(inputs))

    def ids(self) -> list[str]:
        return sorted(path.stem for path in self._directory.glob("*.json"))

    def remove(self, template_id: str) -> None:
        self.path(template_id).unlink(missing_ok=True)

    def load_all(self) -> list[TemplateInputs]:
        if not self._directory.is_dir():
            return []
        return [inputs_from_json(self._defaults, read_inputs(path))
                for path in sorted(self._directory.glob("*.json"))]
