"""A sandbox's egress policy and the address ranges a guest may never reach."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from aenv_common.errors import InvalidArgument

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Always blocked for guest-originated traffic, whatever the policy says: private, shared,
# link-local, loopback, multicast and reserved space (the host and other sandboxes live there).
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


@dataclass(frozen=True)
class EgressPolicy:
    """What a guest may connect to. Public addresses are reachable only with ``allow_internet``;
    then a non-empty ``allow_out`` restricts them to its CIDRs, and ``deny_out`` always wins."""

    allow_internet: bool = False
    allow_out: list[str] = field(default_factory=list)
    deny_out: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        parse_cidrs(self.allow_out)
        parse_cidrs(self.deny_out)


def parse_cidrs(cidrs: list[str]) -> list[IPNetwork]:
    """Parse CIDRs (or bare addresses); raises InvalidArgument naming the first bad entry."""
    networks: list[IPNetwork] = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise InvalidArgument(f"bad CIDR in egress policy: {cidr!r}") from exc
    return networks
