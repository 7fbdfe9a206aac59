"""Per-sandbox networking: one netns per slot with a veth to the host, a tap for the guest
and nftables for port forwarding and egress policy."""

from .manager import NetworkManager
from .policy import EgressPolicy
from .slots import NetSlot, NetworkConfig, netns_exec_prefix

__all__ = ["EgressPolicy", "NetSlot", "NetworkConfig", "NetworkManager", "netns_exec_prefix"]
