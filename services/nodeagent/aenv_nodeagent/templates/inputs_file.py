"""A template's inputs as a node keeps them (`templates/<id>.json`, templates/saved.py) and
pushes them to snapstore for other nodes (`inputs.json`, templates/distribution.py): one file
kind, read back after a restart and by the nodes that pull it.

Format 1 (also what agents wrote before files carried a format): the template's id, its rootfs
(path and digest), its recipe (templates/recipe.py `to_json`) and VM size. Unknown fields are
refused: each shapes the guest built from it, and a node that ignored one would build another
template under the same id.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aenv_common.state_files import StateFormat, Unknown

INPUTS_FORMAT = StateFormat(
    "template inputs", 1,
    frozenset({"template_id", "rootfs", "rootfs_digest", "recipe", "vcpus", "memory_mib",
               "disk_mib"}),
    Unknown.REFUSE)


def write_inputs(path: Path, document: Mapping[str, Any]) -> None:
    """Replace `path` atomically, 0600 (a recipe may hold secrets). Blocking."""
    INPUTS_FORMAT.write(path, document)


def read_inputs(path: Path) -> dict[str, Any]:
    """:raise OSError: unreadable. :raise StateFileError: not a format this agent reads."""
    return INPUTS_FORMAT.read(path)
