"""A sandbox's volume mounts as the node hands them on (pure, no I/O): checked, turned into the
relay's preamble and into envd's ``/init`` ``volumeMounts``, and kept without their tickets by a
snapshot (its record's mounts).

Tickets are secrets (minted by snapstore's VolumeService.GrantMount): they live in records and
the paused marker (0600) like ``envd_access_token``, and no message here ever repeats one.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument

from .config import NFS_PORT, RELAY_IP

PREAMBLE_MAGIC = b"AENV-VOLUMES 1"
MAX_PREAMBLE = 64 * 1024
_TICKET = re.compile(r"[A-Za-z0-9_.-]+")
_VOLUME_ID = re.compile(r"[a-z0-9-]{1,40}")


def check_mounts(mounts: Sequence[cluster_pb2.VolumeMount]) -> None:
    """:raise InvalidArgument: a mount the relay or the guest could not use (the message names
    the path, never the ticket)."""
    paths: set[str] = set()
    for mount in mounts:
        path = mount.path
        if (not path.startswith("/") or path.startswith("//") or path == "/"
                or posixpath.normpath(path) != path or not path.isprintable()):
            raise InvalidArgument(f"volume mount path {path!r} must be absolute and normalized")
        if path in paths:
            raise InvalidArgument(f"two volumes are mounted at {path!r}")
        paths.add(path)
        if not _VOLUME_ID.fullmatch(export_id(mount)):
            raise InvalidArgument(f"the volume mounted at {path!r} has an invalid id")
        if not _TICKET.fullmatch(mount.ticket):
            raise InvalidArgument(f"the volume mounted at {path!r} has no valid ticket")
    if len(preamble(mounts)) > MAX_PREAMBLE:
        raise InvalidArgument("the volume mounts' tickets exceed the relay's 64 KiB preamble")


def export_id(mount: cluster_pb2.VolumeMount) -> str:
    """The volume id the guest mounts (a copy-on-write child's clone stands behind it)."""
    return mount.seen_as or mount.volume_id


def preamble(mounts: Iterable[cluster_pb2.VolumeMount]) -> bytes:
    """What a relay sends first on each connection it dials: ``AENV-VOLUMES 1 <ticket>...\\n``."""
    return b" ".join([PREAMBLE_MAGIC, *(m.ticket.encode("ascii") for m in mounts)]) + b"\n"


def envd_mounts(mounts: Iterable[cluster_pb2.VolumeMount]) -> list[dict[str, Any]]:
    """envd's ``/init`` ``volumeMounts``: each volume through the slot's relay."""
    return [{"path": m.path, "server": RELAY_IP, "port": NFS_PORT,
             "export": f"/{export_id(m)}", "readOnly": m.read_only} for m in mounts]


def saved_mounts(mounts: Iterable[cluster_pb2.VolumeMount]) -> list[dict[str, Any]]:
    """A snapshot's mounts as its ``snapshot.json`` keeps them: no tickets."""
    return [{"path": m.path, "volume_id": m.volume_id, "name": m.name,
             "read_only": m.read_only, "seen_as": m.seen_as} for m in mounts]


def loaded_mounts(saved: Iterable[dict[str, Any]]) -> list[cluster_pb2.VolumeMount]:
    return [cluster_pb2.VolumeMount(
        path=str(m["path"]), volume_id=str(m["volume_id"]), name=str(m.get("name", "")),
        read_only=bool(m.get("read_only", False)), seen_as=str(m.get("seen_as", "")))
        for m in saved]
