"""The files that say which disks a template capture stands on, when they are not simply this
node's own: `disks.json`, the digests of the rootfs and tools disk a capture was made on (pushed
with it, read by the node that pulls it), and `backing.json`, where a pulled capture's disks
lie on this node.

Format 1 of each (also what agents wrote before files carried a format): an object from the
disk's name (`rootfs`, `tools_disk`: templates/guest_disks.py `disk_paths`) to its digest, or
its path. Unknown fields are refused in both: a capture restores only on the very disks its
guest's page cache saw, and a disk this agent does not know of is one it would not put under
the guest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aenv_common.state_files import StateFormat, Unknown

DISKS_FILE = "disks.json"
BACKING_FILE = "backing.json"
_DISKS = frozenset({"rootfs", "tools_disk"})
DIGESTS_FORMAT = StateFormat("capture's disk digests", 1, _DISKS, Unknown.REFUSE)
BACKING_FORMAT = StateFormat("capture's backing disks", 1, _DISKS, Unknown.REFUSE)


def write_digests(path: Path, digests: Mapping[str, str]) -> None:
    """Blocking."""
    DIGESTS_FORMAT.write(path, dict(sorted(digests.items())), mode=0o644)


def read_digests(path: Path) -> dict[str, str]:
    """:raise OSError: unreadable. :raise StateFileError: not a format this agent reads."""
    return {name: str(digest) for name, digest in DIGESTS_FORMAT.read(path).items()}


def write_backing(directory: Path, paths: Mapping[str, Path]) -> None:
    """Blocking."""
    BACKING_FORMAT.write(directory / BACKING_FILE,
                         {name: str(path) for name, path in paths.items()}, mode=0o644)


def read_backing(directory: Path) -> dict[str, Path] | None:
    """The disks the capture in `directory` stands on; None when they are this node's own.

    :raise OSError: unreadable. :raise StateFileError: not a format this agent reads.
    """
    try:
        paths = BACKING_FORMAT.read(directory / BACKING_FILE)
    except FileNotFoundError:
        return None
    return {name: Path(path) for name, path in paths.items()}
