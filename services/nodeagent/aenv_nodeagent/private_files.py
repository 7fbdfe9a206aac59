"""Files that hold secrets (envd tokens): written atomically and readable by root only."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_private_json(path: Path, data: object) -> None:
    """Write atomically (a crash leaves the old or the new file), mode 0600."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(data, default=str))
    tmp.replace(path)
