"""Volume ids, names and mount paths: pure validation, E2B's rules where E2B has them.

E2B's names are `^[a-zA-Z0-9_-]+$` (its `isValidVolumeName`, answered 400 "Invalid volume
name"); a copy-on-write clone is named `<name>-<child sandbox id>`, which keeps to the same
rule. Ids are minted here: `vol-` + 20 of [a-z0-9] (docs/volumes.md).
"""

from __future__ import annotations

import posixpath
import re
import secrets
import string

from aenv_common.errors import InvalidArgument

VOLUME_ID_PREFIX = "vol-"
_ID_ALPHABET = string.ascii_lowercase + string.digits
_ID = re.compile(r"^vol-[a-z0-9]{20}$")
_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
# Long enough for any E2B name in practice; a clone adds "-" and a sandbox id (at most 64).
MAX_NAME = 128
# Where no volume may be mounted: the guest's own pseudo file systems.
_RESERVED = ("/proc", "/sys", "/dev")
# At most this many mounts per sandbox (each is one NFS mount and one relay connection).
MAX_MOUNTS = 16


def new_volume_id() -> str:
    return VOLUME_ID_PREFIX + "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))


def is_volume_id(text: str) -> bool:
    return bool(_ID.match(text))


def check_name(name: str) -> None:
    """:raise InvalidArgument: E2B's "Invalid volume name"."""
    if not _NAME.match(name) or len(name) > MAX_NAME:
        raise InvalidArgument("Invalid volume name")


def clone_name(name: str, child_id: str) -> str:
    return f"{name}-{child_id}"


def check_mount_path(path: str) -> str:
    """A guest mount point: absolute, normalized (no `.`, `..`, `//` or trailing `/`), not `/`
    and not `/proc`, `/sys`, `/dev` or under them.

    :raise InvalidArgument: saying which rule the path breaks.
    """
    if not path.startswith("/"):
        raise InvalidArgument(f"volume mount path {path!r} must be absolute")
    if path == "/":
        raise InvalidArgument("a volume cannot be mounted at /")
    if posixpath.normpath(path) != path or "//" in path or "\x00" in path:
        raise InvalidArgument(f"volume mount path {path!r} must be normalized")
    for reserved in _RESERVED:
        if path == reserved or path.startswith(reserved + "/"):
            raise InvalidArgument(f"a volume cannot be mounted at {path!r} ({reserved} is the "
                                  "guest's own)")
    return path


def check_disjoint(paths: list[str]) -> None:
    """No two mounts on one path, and none inside another (a mount would hide the other's
    mount point, and the order envd mounts them in would matter).

    :raise InvalidArgument: naming the two paths.
    """
    if len(paths) > MAX_MOUNTS:
        raise InvalidArgument(f"at most {MAX_MOUNTS} volume mounts per sandbox")
    for i, first in enumerate(paths):
        for second in paths[i + 1:]:
            if first == second:
                raise InvalidArgument(f"two volumes are mounted at {first!r}")
            outer, inner = sorted((first, second), key=len)
            if inner.startswith(outer + "/"):
                raise InvalidArgument(f"volume mount {inner!r} is inside volume mount {outer!r}")
