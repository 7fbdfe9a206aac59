"""Prints the third-party requirements of the aenv packages whose pyproject.toml files are given
(one a line), so the image installs them in a layer of their own: a change of aenv's code then
rebuilds only the layer of aenv's packages, not every dependency."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def third_party(pyprojects: list[Path]) -> list[str]:
    """Every declared dependency that is not one of the given packages, sorted, once."""
    projects = [tomllib.loads(path.read_text())["project"] for path in pyprojects]
    ours = {str(project["name"]) for project in projects}
    wanted: set[str] = set()
    for project in projects:
        for requirement in project.get("dependencies", []):
            name = re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0]
            if name not in ours:
                wanted.add(requirement)
    return sorted(wanted)


if __name__ == "__main__":
    print("\n".join(third_party([Path(arg) for arg in sys.argv[1:]])))
