"""Address ranges a guest may never reach, whatever its policy says.

Private, shared, link-local, loopback, multicast and reserved space: the host, the platform's
services and other sandboxes live there. The node's data plane drops them before a policy is
consulted, and the gateway refuses an egress proxy that is (or resolves to) one of them, so one
list drives both.
"""

from __future__ import annotations

import bisect
import ipaddress
from collections.abc import Iterable

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


class AddressSet:
    """Networks merged into sorted ranges per IP version: membership costs a binary search,
    whether a policy lists 3 networks or 1024."""

    def __init__(self, networks: Iterable[IPNetwork]) -> None:
        listed = list(networks)
        v4 = ipaddress.collapse_addresses(n for n in listed if isinstance(n, ipaddress.IPv4Network))
        v6 = ipaddress.collapse_addresses(n for n in listed if isinstance(n, ipaddress.IPv6Network))
        self._ranges: dict[int, tuple[list[int], list[int]]] = {}
        for version, merged in ((4, list(v4)), (6, list(v6))):
            spans = [(int(n.network_address), int(n.broadcast_address)) for n in merged]
            self._ranges[version] = ([s for s, _ in spans], [e for _, e in spans])

    def __contains__(self, address: IPAddress) -> bool:
        starts, ends = self._ranges[address.version]
        at = bisect.bisect_right(starts, int(address)) - 1
        return at >= 0 and int(address) <= ends[at]


_BLOCKED = AddressSet(BLOCKED_NETWORKS)


def is_blocked(address: IPAddress) -> bool:
    """Whether ``address`` lies in an always-blocked range."""
    return address in _BLOCKED
