"""Address ranges a guest may never reach, whatever its policy says.

Private, shared, link-local, loopback, multicast and reserved space: the host, the platform's
services and other sandboxes live there. The node's data plane drops them before a policy is
consulted, and the gateway refuses an egress proxy that is (or resolves to) one of them, so one
list drives both.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALWAYS_BLOCKED: tuple[str, ...] = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/127",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
)

BLOCKED_NETWORKS: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in ALWAYS_BLOCKED)


def is_blocked(address: IPAddress) -> bool:
    """Whether ``address`` lies in an always-blocked range."""
    return any(address in network for network in BLOCKED_NETWORKS)
