"""The relay's settings, one typed place (the node's settings that matter here are only
``snapstore_address``: where the volume server's address is asked)."""

from __future__ import annotations

from dataclasses import dataclass

from aenv_nodeagent.network.firewall import VOLUME_RELAY_PORT
from aenv_nodeagent.network.slots import GATEWAY_IP

# Where a guest mounts its volumes: the tap's address in its slot, the port the slot's firewall
# opens (envd's /init names both to the guest's kernel).
RELAY_IP = GATEWAY_IP
NFS_PORT = VOLUME_RELAY_PORT


@dataclass(frozen=True)
class RelaySettings:
    # Bytes read from one side before they are written to the other and drained: a relay never
    # holds more than this (plus the transports' write buffers) per direction of a connection.
    chunk_bytes: int = 256 * 1024
    # How long dialing the volume server may take before the guest's connection is closed (its
    # kernel's RPC layer dials again).
    dial_timeout_s: float = 5.0
    # How long snapstore may take to say where the volume server is.
    endpoint_timeout_s: float = 5.0
    # Guest connections one slot's relay serves at once; beyond that new ones are closed (a
    # guest's NFS client uses one per server, a remount a second).
    max_connections: int = 64
    backlog: int = 64
