"""Volumes on the node: the relay that lets a guest's NFS client reach the volume server
(snapstore) through its slot, presenting the sandbox's tickets, and the mounts handed to envd.
docs/architecture.md, "Volumes"."""

from .config import NFS_PORT, RELAY_IP, RelaySettings
from .endpoint import VolumeEndpoint
from .mounts import (
    check_mounts,
    envd_mounts,
    loaded_mounts,
    preamble,
    saved_mounts,
)
from .relays import VolumeRelays

__all__ = [
    "NFS_PORT",
    "RELAY_IP",
    "RelaySettings",
    "VolumeEndpoint",
    "VolumeRelays",
    "check_mounts",
    "envd_mounts",
    "loaded_mounts",
    "preamble",
    "saved_mounts",
]
