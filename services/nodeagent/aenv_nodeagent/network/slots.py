"""Names and addresses of per-sandbox network slots: pure math, no I/O.

Slot ``i`` owns the i-th /30 of the pool: the host end of its veth gets ``.1``, the netns end
``.2``.
Inside every netns the guest side is identical (same tap name, addresses and MACs), which is what
lets a snapshot taken in one slot be restored or forked into any other.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from aenv_common.errors import InvalidArgument

GUEST_IP = "169.254.0.21"
GATEWAY_IP = "169.254.0.22"  # the tap's address: the guest's default gateway
GUEST_PREFIXLEN = 30
GUEST_MAC = "02:fc:00:00:00:15"
TAP_MAC = "02:fc:00:00:00:16"  # identical in every netns, or restored guests' ARP caches break
TAP_NAME = "tap0"
NS_VETH_NAME = "veth0"  # the netns end of the veth pair
SLOT_PREFIXLEN = 30
IFNAMSIZ = 15  # longest Linux interface name

_PREFIX_RE = re.compile(r"^[a-z](?:[a-z0-9]*[a-z])?$")
_GUEST_NET = ipaddress.IPv4Network(f"{GUEST_IP}/{GUEST_PREFIXLEN}", strict=False)


@dataclass(frozen=True)
class NetworkConfig:
    """Where slots live: a name prefix (ends in a letter, so index digits never blur into it) and
    an IPv4 pool that is carved into one /30 per slot."""

    prefix: str = "aenv"
    pool_cidr: str = "10.211.0.0/16"

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise InvalidArgument(
                f"network prefix {self.prefix!r} must be lowercase letters/digits, "
                "start and end with a letter"
            )
        pool = self.pool
        if pool.prefixlen > SLOT_PREFIXLEN:
            raise InvalidArgument(f"pool {self.pool_cidr} is smaller than one /{SLOT_PREFIXLEN}")
        if pool.overlaps(_GUEST_NET):
            raise InvalidArgument(f"pool {self.pool_cidr} overlaps the fixed guest network")
        longest = host_veth_name(self.prefix, self.capacity - 1)
        if len(longest) > IFNAMSIZ:
            raise InvalidArgument(
                f"prefix {self.prefix!r} too long for pool {self.pool_cidr}: {longest!r} "
                f"exceeds {IFNAMSIZ} characters"
            )

    @property
    def pool(self) -> ipaddress.IPv4Network:
        try:
            return ipaddress.IPv4Network(self.pool_cidr)
        except ValueError as exc:
            raise InvalidArgument(f"bad pool CIDR {self.pool_cidr!r}: {exc}") from exc

    @property
    def capacity(self) -> int:
        """How many slots the pool holds."""
        return int(self.pool.num_addresses >> (32 - SLOT_PREFIXLEN))


@dataclass(frozen=True)
class NetSlot:
    index: int
    netns: str
    host_veth: str
    host_ip: str
    ns_ip: str
    tap: str = TAP_NAME
    guest_ip: str = GUEST_IP
    guest_mac: str = GUEST_MAC


def netns_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index}"


def host_veth_name(prefix: str, index: int) -> str:
    return f"{prefix}{index}h"


def slot_for(config: NetworkConfig, index: int) -> NetSlot:
    """The slot with this index; raises InvalidArgument outside the pool."""
    if not 0 <= index < config.capacity:
        raise InvalidArgument(f"slot index {index} outside pool {config.pool_cidr}")
    base = config.pool.network_address + (index << (32 - SLOT_PREFIXLEN))
    return NetSlot(
        index=index,
        netns=netns_name(config.prefix, index),
        host_veth=host_veth_name(config.prefix, index),
        host_ip=str(base + 1),
        ns_ip=str(base + 2),
    )


def index_from_netns(prefix: str, name: str) -> int | None:
    """The slot index a netns name encodes, or None if it is not one of this prefix's."""
    match = re.fullmatch(rf"{re.escape(prefix)}-(0|[1-9][0-9]*)", name)
    return int(match.group(1)) if match else None


def index_from_host_veth(prefix: str, name: str) -> int | None:
    """The slot index a host veth name encodes, or None if it is not one of this prefix's."""
    match = re.fullmatch(rf"{re.escape(prefix)}(0|[1-9][0-9]*)h", name)
    return int(match.group(1)) if match else None


def netns_exec_prefix(slot: NetSlot) -> list[str]:
    """argv prefix that runs a command inside the slot's netns. nsenter only switches the network
    namespace (one setns + exec); `ip netns exec` would also build a mount namespace and remount
    /sys, which costs more and is not needed to open the tap."""
    return ["nsenter", f"--net=/run/netns/{slot.netns}", "--"]
