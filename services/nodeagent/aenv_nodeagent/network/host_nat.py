"""The root netns's half of a guest's own egress: forwarding and NAT for one node's slot pool.

What a guest sends out itself (an IP-only policy's traffic; UDP and ICMP to an allowed name's
resolved addresses) leaves its slot masqueraded to the slot's ``ns_ip`` (firewall.py) and
arrives on the slot's host veth. The egress process's connections need none of this: it dials
from the root netns itself. One nft table per net prefix, ``ip aenv_nat_<prefix>``, then:

- ``forward``: the pool's packets from its own host veths (``<prefix>*``) pass towards
  ``egress_forward_destinations`` (NodeAgentSettings), never to an always-blocked range or the
  pool; replies pass back; every other packet from or to the pool is dropped. Packets that are
  not the pool's are not judged here (``policy accept``): the host's own tables (docker, a host
  firewall) keep deciding those, and an accept here cannot override their drop.
- ``postrouting``: the pool's addresses leaving by any link but a slot's are masqueraded to the
  node's address on that link.

Forwarding is switched on per link, not with the global ``ip_forward``: the kernel forwards
what arrives on a link whose ``net.ipv4.conf.<link>.forwarding`` is 1, whatever the outgoing
link's says. So each slot's host veth (the guest's packets) and each uplink the destinations
route through (the replies) get it, and no other link of the host starts routing. Switched-on
uplinks stay on after the node stops (something else may rely on them by then); the table goes
with the node's stop or ``cleanup``. With no destinations no link is switched on at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from aenv_common.egress.blocked import BLOCKED_NETWORKS

from .nft import run_nft
from .slots import NetworkConfig, index_from_host_veth

log = logging.getLogger(__name__)

_SYSCTL = Path("/proc/sys/net/ipv4/conf")
_MAIN_TABLE = 254


@dataclass(frozen=True)
class HostNat:
    config: NetworkConfig
    destinations: tuple[ipaddress.IPv4Network, ...]

    @classmethod
    def of(cls, config: NetworkConfig,
           destinations: Iterable[ipaddress.IPv4Network]) -> HostNat:
        return cls(config, tuple(ipaddress.collapse_addresses(destinations)))

    @property
    def never(self) -> list[ipaddress.IPv4Network]:
        """Where no guest packet is forwarded, whatever the destinations say."""
        return list(ipaddress.collapse_addresses(
            [n for n in BLOCKED_NETWORKS if isinstance(n, ipaddress.IPv4Network)]
            + [self.config.pool]))

    @property
    def table(self) -> str:
        return f"aenv_nat_{self.config.prefix}"

    def render(self) -> str:
        """The table, replaced whole in one transaction (declared first, so the delete never
        fails): a restarted node ends with exactly one."""
        pool, veths = self.config.pool_cidr, f'"{self.config.prefix}*"'
        allowed = ([f"    ip daddr {_set(self.destinations)} accept"]
                   if self.destinations else [])
        return "\n".join([
            *self.render_removal().splitlines(),
            f"table ip {self.table} {{",
            "  chain forward {",
            "    type filter hook forward priority filter; policy accept;",
            f"    ip saddr {pool} jump from_guests",
            f"    ip daddr {pool} ct state established,related accept",
            f"    ip daddr {pool} drop",
            "  }",
            "  chain from_guests {",
            f"    iifname != {veths} drop",  # the pool's address on any other link: spoofed
            "    ct state established,related accept",
            f"    ip daddr {_set(self.never)} drop",
            *allowed,
            "    drop",
            "  }",
            "  chain postrouting {",
            "    type nat hook postrouting priority srcnat; policy accept;",
            f"    ip saddr {pool} oifname != {veths} masquerade",
            "  }",
            "}",
            "",
        ])

    def render_removal(self) -> str:
        return f"table ip {self.table} {{}}\ndelete table ip {self.table}\n"

    async def ensure(self) -> None:
        """Create (or replace) the table and switch forwarding on where it is needed now: the
        uplinks and the host veths of slots an earlier run left."""
        await asyncio.to_thread(run_nft, self.render())
        if self.destinations:
            await asyncio.to_thread(self._switch_on, self._slot_links())
        log.info("guest forwarding configured", extra={
            "table": self.table, "destinations": [str(d) for d in self.destinations]})

    async def forward_slot(self, host_veth: str) -> None:
        """Let the kernel forward a new slot's packets (and, as routes may have changed since
        the start, their replies)."""
        if self.destinations:
            await asyncio.to_thread(self._switch_on, [host_veth])

    async def remove(self) -> None:
        await asyncio.to_thread(run_nft, self.render_removal())

    def _switch_on(self, slot_links: Sequence[str]) -> None:
        with IPRoute() as root:
            links = [*slot_links,
                     *uplinks(root, self.destinations, self.config.prefix, self.never)]
        switched = [link for link in dict.fromkeys(links) if _forward(link)]
        if switched:
            log.info("forwarding switched on", extra={"links": switched})

    def _slot_links(self) -> list[str]:
        prefix = self.config.prefix
        return [name for name in os.listdir("/sys/class/net")
                if index_from_host_veth(prefix, name) is not None]


def uplinks(root: IPRoute, destinations: Sequence[ipaddress.IPv4Network],
            prefix: str, never: Sequence[ipaddress.IPv4Network] = ()) -> list[str]:
    """The links the main routing table sends some address of ``destinations`` through: for
    each, its most specific covering route's and those of the routes inside it (a default
    route counts only for a destination nothing more specific covers). Routes into ``never``
    (the blocked ranges), loopback and the slots' own links are left out."""
    names = {int(link["index"]): str(link.get_attr("IFLA_IFNAME")) for link in root.get_links()}
    routes = [(ipaddress.IPv4Network(f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}"),
               _route_links(r))
              for r in root.get_routes(family=socket.AF_INET, table=_MAIN_TABLE)]
    routes = [(net, oifs) for net, oifs in routes
              if not any(net.subnet_of(blocked) for blocked in never)]
    found: list[int] = []
    for wanted in destinations:
        if any(wanted.subnet_of(blocked) for blocked in never):
            continue  # forwarded nowhere: its link need not forward
        covering = [(net, oifs) for net, oifs in routes if wanted.subnet_of(net)]
        if covering:
            found += max(covering, key=lambda route: route[0].prefixlen)[1]
        found += [i for net, oifs in routes if net != wanted and net.subnet_of(wanted)
                  for i in oifs]
    return [name for name in dict.fromkeys(names[i] for i in found if i in names)
            if name != "lo" and index_from_host_veth(prefix, name) is None]


def _route_links(route: Any) -> list[int]:
    if (oif := route.get_attr("RTA_OIF")) is not None:
        return [int(oif)]
    return [int(hop["oif"]) for hop in route.get_attr("RTA_MULTIPATH") or []]


def _forward(link: str) -> bool:
    """Switch forwarding on for one link; True if it was off. A link gone meanwhile (a slot
    destroyed) is no error."""
    path = _SYSCTL / link / "forwarding"
    try:
        if path.read_text().strip() == "1":
            return False
        path.write_text("1")
    except FileNotFoundError:
        return False
    return True


def _set(networks: Iterable[ipaddress.IPv4Network]) -> str:
    return "{ " + ", ".join(str(n) for n in networks) + " }"
