"""The state files of agents from before files carried a format (format 1), as they wrote
them: committed under `format1/`, written by that code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

FORMAT1 = Path(__file__).parent / "format1"


def old_file(name: str, directory: Path, as_name: str | None = None) -> Path:
    """A copy of the format-1 file `name` in `directory`."""
    return Path(shutil.copy(FORMAT1 / name, directory / (as_name or name)))


def newer(path: Path, fmt: int = 99, **fields: Any) -> Path:
    """Rewrite `path` as a newer agent might have: another format, maybe more fields."""
    document = json.loads(path.read_text()) | fields | {"format": fmt}
    path.write_text(json.dumps(document))
    return path
