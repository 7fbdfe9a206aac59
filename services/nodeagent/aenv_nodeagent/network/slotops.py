"""Blocking build/teardown sequences for one slot. Each runs in a fresh thread
(see namespaces.run_in_fresh_thread) because it moves that thread between namespaces."""

from __future__ import annotations

import os
from collections.abc import Callable

from pyroute2 import IPRoute

from aenv_common.errors import Conflict

from . import netlink
from .namespaces import create_and_enter_netns, enter_netns, remove_netns
from .nft import run_nft
from .slots import NetSlot

# Gets the root netns's own addresses, returns the nft script to apply in the slot netns.
ScriptFactory = Callable[[list[str]], str]


def build_slot(slot: NetSlot, render_ruleset: ScriptFactory) -> None:
    """Create the slot's netns, veth pair, tap, forwarding and nft table. Leaves partial state
    behind on failure: the caller tears it down with teardown_slot."""
    root_ns_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # pyroute2 opens its socket lazily per thread: touch it now, while still in the root netns.
        with IPRoute() as root:
            if netlink.link_exists(root, slot.host_veth):
                raise FileExistsError(f"link {slot.host_veth} already exists")
            host_addresses = netlink.local_addresses(root)
            if taken := {slot.host_ip, slot.ns_ip} & set(host_addresses):
                # Another node agent (or anything else) on this host uses the same pool: routes
                # to our guests would go to its links.
                raise Conflict(
                    f"address {sorted(taken)[0]} of network slot {slot.netns} is already "
                    "assigned on this host: give each node agent its own net_pool_cidr")
            create_and_enter_netns(slot.netns)
            with IPRoute() as ns:
                netlink.create_veth_to_root(ns, slot, root_ns_fd)
                netlink.create_persistent_tap()
                netlink.configure_ns_links(ns, slot)
            netlink.enable_ipv4_forwarding()
            run_nft(render_ruleset(host_addresses))
            netlink.configure_host_end(root, slot)
    finally:
        os.close(root_ns_fd)


def apply_in_slot(slot: NetSlot, render_script: ScriptFactory) -> None:
    """Apply one nft script (one transaction) inside an existing slot netns."""
    with IPRoute() as root:
        host_addresses = netlink.local_addresses(root)
    enter_netns(slot.netns)
    run_nft(render_script(host_addresses))


def teardown_slot(slot: NetSlot) -> bool:
    """Remove what exists of the slot; True if anything did. Only the host veth is deleted
    explicitly, and first: a netns releases its devices asynchronously and the veth name would
    stay taken meanwhile. The tap and the nft table live inside the netns and go with it (the
    kernel batches that cleanup; deleting them one by one costs ~30 ms more per slot)."""
    with IPRoute() as root:
        removed = netlink.delete_link(root, slot.host_veth)
    return remove_netns(slot.netns) or removed
