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
    then a non-empty ``allow_out`` restricts them to its CIDRs, and ``deny_out`` always wins.
    ``dns_servers`` only matter to domain entries in ``allow_out`` (as in E2B), which nodes
    do not accept: they are validated and kept, with no effect on the rules."""

    allow_internet: bool = False
    allow_out: list[str] = field(default_factory=list)
    deny_out: list[str] = field(default_factory=list)
    dns_servers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        parse_cidrs(self.allow_out)
        parse_cidrs(self.deny_out)
        parse_dns_servers(self.dns_servers)


def parse_cidrs(cidrs: list[str]) -> list[IPNetwork]:
    """Parse CIDRs (or bare addresses); raises InvalidArgument naming the first bad entry."""
    networks: list[IPNetwork] = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            if any(c.isalpha() for c in cidr) and ":" not in cidr:
                # Filtering by name needs a DNS/SNI-aware egress proxy, which nodes do not run.
                raise InvalidArgument(
                    f"egress policy entry {cidr!r}: domain names are not supported, "
                    "only IP addresses and CIDRs") from exc
            raise InvalidArgument(f"bad CIDR in egress policy: {cidr!r}") from exc
    return networks


MAX_DNS_SERVERS = 10


def parse_dns_servers(servers: list[str]) -> list[ipaddress.IPv4Address]:
    """DNS servers are up to 10 IPv4 addresses (as in E2B's API)."""
    if len(servers) > MAX_DNS_SERVERS:
        raise InvalidArgument(f"at most {MAX_DNS_SERVERS} DNS servers are accepted")
    parsed: list[ipaddress.IPv4Address] = []
    for server in servers:
        try:
            parsed.append(ipaddress.IPv4Address(server.strip()))
        except ValueError as exc:
            raise InvalidArgument(f"bad DNS server (IPv4 address expected): {server!r}") from exc
    return parsed
