"""Link, address and route operations (pyroute2 IPRoute, synchronous).

Every function acts on the netns of the IPRoute handle it gets, or, for the tap and the sysctl,
of the calling thread; callers run them in a thread that entered the right netns.
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .slots import (
    GATEWAY_IP,
    GUEST_PREFIXLEN,
    NS_VETH_NAME,
    SLOT_PREFIXLEN,
    TAP_MAC,
    TAP_NAME,
    NetSlot,
)

_TUNSETIFF = 0x400454CA
_TUNSETPERSIST = 0x400454CB
_TUNSETOWNER = 0x400454CC
_IFF_TAP = 0x0002
_IFF_NO_PI = 0x1000
_IFF_VNET_HDR = 0x4000
_ENODEV = 19


def create_persistent_tap(name: str = TAP_NAME) -> None:
    """Create a persistent, root-owned tap in the calling thread's netns. Flags match what QEMU's
    `-netdev tap` asks for (single queue, no packet info, vnet header), so QEMU can attach."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        ifreq = struct.pack("16sH22x", name.encode(), _IFF_TAP | _IFF_NO_PI | _IFF_VNET_HDR)
        fcntl.ioctl(fd, _TUNSETIFF, ifreq)
        fcntl.ioctl(fd, _TUNSETOWNER, 0)
        fcntl.ioctl(fd, _TUNSETPERSIST, 1)
    finally:
        os.close(fd)


def enable_ipv4_forwarding() -> None:
    """Turn on forwarding in the calling thread's netns (/proc/sys/net follows the opener's)."""
    with open("/proc/sys/net/ipv4/ip_forward", "w") as sysctl:
        sysctl.write("1")


def create_veth_to_root(ns: IPRoute, slot: NetSlot, root_ns_fd: int) -> None:
    """Create the veth pair from inside the slot netns with its peer born in the root netns, so
    no temporary name ever appears in the root netns."""
    ns.link(
        "add",
        ifname=NS_VETH_NAME,
        kind="veth",
        peer={"ifname": slot.host_veth, "net_ns_fd": root_ns_fd},
    )


def configure_ns_links(ns: IPRoute, slot: NetSlot) -> None:
    """Addresses, MAC and routes inside the slot netns (the veth and the tap must exist)."""
    ns.link("set", index=_index(ns, "lo"), state="up")
    veth = _index(ns, NS_VETH_NAME)
    ns.addr("add", index=veth, address=slot.ns_ip, prefixlen=SLOT_PREFIXLEN)
    ns.link("set", index=veth, state="up")
    tap = _index(ns, TAP_NAME)
    ns.link("set", index=tap, address=TAP_MAC)
    ns.addr("add", index=tap, address=GATEWAY_IP, prefixlen=GUEST_PREFIXLEN)
    ns.link("set", index=tap, state="up")
    ns.route("add", dst="0.0.0.0/0", gateway=slot.host_ip)


def configure_host_end(root: IPRoute, slot: NetSlot) -> None:
    index = _index(root, slot.host_veth)
    root.addr("add", index=index, address=slot.host_ip, prefixlen=SLOT_PREFIXLEN)
    root.link("set", index=index, state="up")


def link_exists(ipr: IPRoute, name: str) -> bool:
    return bool(ipr.link_lookup(ifname=name))


def delete_link(ipr: IPRoute, name: str) -> bool:
    """Delete a link by name; False if it was already gone."""
    for index in ipr.link_lookup(ifname=name):
        try:
            ipr.link("del", index=index)
        except NetlinkError as exc:
            if exc.code != _ENODEV:
                raise
            return False
        return True
    return False


def link_names(ipr: IPRoute) -> list[str]:
    return [str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()]


def local_addresses(ipr: IPRoute) -> list[str]:
    """Every address assigned in the handle's netns (the host's own, for the root netns)."""
    return [str(addr.get_attr("IFA_ADDRESS")) for addr in ipr.get_addr()]


def _index(ipr: IPRoute, name: str) -> int:
    found: list[Any] = ipr.link_lookup(ifname=name)
    if not found:
        raise NetlinkError(_ENODEV, f"no link named {name}")
    return int(found[0])
