"""nftables rulesets for one slot's netns, rendered as `nft -f` text (pure, no I/O).

Inside the netns: TCP to the netns end of the veth is DNATed to the guest (same port) and
masqueraded to the tap address, so the host reaches every guest port at ``<ns_ip>:<port>`` and
replies always come back through the netns. Guest-originated traffic is filtered in the ``egress``
chain, which ``update_policy`` replaces in one nft transaction; what passes leaves masqueraded
to the slot's ``ns_ip`` (every guest has the same address), for the root netns's table of the
pool (host_nat.py) to forward.

A policy that names hosts, has header rules or an egress proxy (``needs_proxy``) puts the node's
egress process on the guest's path (docs/egress.md): guest TCP not bound for a blocked
range is redirected to the slot's proxy listener and every DNS query (port 53, UDP and TCP, to
any address) to its resolver, both on the tap's address, where the input chain accepts exactly
those redirected flows. What is left in the ``egress`` chain (UDP, ICMP) passes to an allowed
name only through the ``resolved4``/``resolved6`` sets, which the resolver fills with
timeouts. An IP-only policy renders exactly as before: no redirect, no sets. Whatever the
policy, the input chain opens one port of the netns itself to the guest: TCP to
``GATEWAY_IP:2049``, where the agent's volume relay listens for the guest's NFS client
(sandboxes without volumes have no listener there: the kernel answers RST).

Before any of that, tap0's ingress admits only what the guest may send as itself (its MAC, its
IPv4 address, ARP about itself asking for its gateway): a guest's spoofed sources, forged MACs,
ARP claims, IPv6 and VLAN tags never reach routing, conntrack or the neighbour table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from .policy import ALWAYS_BLOCKED, EgressPolicy, IPNetwork, parse_cidrs
from .slots import GATEWAY_IP, GUEST_IP, GUEST_MAC, NS_VETH_NAME, TAP_NAME, NetSlot

TABLE = "aenv"
FAMILY = "inet"
NOT_THE_GUEST = "not the guest"  # the counter of what tap0's ingress dropped
RESOLVED4 = "resolved4"
RESOLVED6 = "resolved6"
_REDIRECTED = ("prerouting", "input", "egress")  # the chains a policy switch rewrites
VOLUME_RELAY_PORT = 2049  # volumes/config.py NFS_PORT: the relay the agent opens in the slot


@dataclass(frozen=True)
class EgressPorts:
    """Where, on the slot's gateway address, redirected guest TCP and DNS land."""

    proxy: int = 15001
    dns: int = 15053


def render_ruleset(
    slot: NetSlot, policy: EgressPolicy, blocked_extra: Iterable[str],
    ports: EgressPorts = EgressPorts(),
) -> str:
    """The whole table for a fresh netns. ``blocked_extra``: addresses the guest must never
    reach besides ALWAYS_BLOCKED (the root netns's own addresses, the slot pool)."""
    extra = list(blocked_extra)
    return "\n".join(
        [
            f"table {FAMILY} {TABLE} {{",
            *(_resolved_sets() if policy.needs_proxy else []),
            "  chain prerouting {",
            "    type nat hook prerouting priority dstnat; policy accept;",
            *_indent(_prerouting_rules(slot, policy, extra, ports)),
            "  }",
            "  chain postrouting {",
            "    type nat hook postrouting priority srcnat; policy accept;",
            f'    oifname "{TAP_NAME}" ct status dnat masquerade',
            # Every guest has the same address: what it sends out itself leaves as the slot's
            # own (host_nat.py forwards and masquerades the pool from the root netns).
            f'    oifname "{NS_VETH_NAME}" ip saddr {GUEST_IP} masquerade',
            "  }",
            "  chain input {",
            "    type filter hook input priority filter; policy accept;",
            *_indent(_input_rules(policy, ports)),
            "  }",
            "  chain forward {",
            "    type filter hook forward priority filter; policy drop;",
            "    ct state established,related accept",
            "    ct state invalid drop",
            f'    iifname "{NS_VETH_NAME}" oifname "{TAP_NAME}" ct status dnat accept',
            f'    iifname "{TAP_NAME}" jump egress',
            "  }",
            "  chain egress {",
            *_indent(render_egress_rules(policy, extra)),
            "  }",
            "}",
            *render_guest_ingress(),
            "",
        ]
    )


def render_guest_ingress() -> list[str]:
    """The netdev table on tap0's ingress: an allow list of the frames a guest sends as itself,
    everything else counted and dropped. Every slot's guest has the same MAC and address, so the
    rules are the same in every netns and hold across restores and forks."""
    own = f"ether saddr {GUEST_MAC}"
    return [
        f"table netdev {TABLE} {{",
        "  chain guest {",
        f'    type filter hook ingress device "{TAP_NAME}" priority filter; policy drop;',
        f"    {own} ip saddr {GUEST_IP} accept",
        f"    {own} arp saddr ether {GUEST_MAC} arp saddr ip {GUEST_IP} "
        f"arp daddr ip {GATEWAY_IP} accept",
        f'    counter comment "{NOT_THE_GUEST}"',
        "  }",
        "}",
    ]


def render_policy_update(
    policy: EgressPolicy, blocked_extra: Iterable[str], slot: NetSlot | None = None,
    ports: EgressPorts = EgressPorts(), flush_resolved: bool = False,
) -> str:
    """Replace the egress chain's rules; nft applies the file as one atomic transaction. With
    ``slot``, the redirect and input chains too and the resolved sets made or removed: a switch
    between a policy that needs the egress process and one that does not. ``flush_resolved``
    empties the kept sets (the allowed names changed: their old answers vouch no more)."""
    extra = list(blocked_extra)
    if slot is None:
        chains = [("egress", render_egress_rules(policy, extra))]
    else:
        chains = [("prerouting", _prerouting_rules(slot, policy, extra, ports)),
                  ("input", _input_rules(policy, ports)),
                  ("egress", render_egress_rules(policy, extra))]
    lines = [f"flush chain {FAMILY} {TABLE} {name}" for name, _ in chains]
    lines.append(f"table {FAMILY} {TABLE} {{")
    if slot is not None:
        lines += _resolved_sets()  # declared either way: then kept, or deleted below
    for name, rules in chains:
        lines += [f"  chain {name} {{", *_indent(rules), "  }"]
    lines.append("}")
    if slot is not None and (flush_resolved or not policy.needs_proxy):
        verb = "flush" if policy.needs_proxy else "delete"
        lines += [f"{verb} set {FAMILY} {TABLE} {name}" for name in (RESOLVED4, RESOLVED6)]
    return "\n".join([*lines, ""])


def _resolved_sets() -> list[str]:
    return [f"  set {RESOLVED4} {{ type ipv4_addr; flags timeout; }}",
            f"  set {RESOLVED6} {{ type ipv6_addr; flags timeout; }}"]


def _prerouting_rules(
    slot: NetSlot, policy: EgressPolicy, blocked_extra: list[str], ports: EgressPorts
) -> list[str]:
    forward = (f'iifname "{NS_VETH_NAME}" ip daddr {slot.ns_ip} meta l4proto tcp '
               f"dnat ip to {GUEST_IP}")
    if not policy.needs_proxy:
        return [forward]
    blocked4 = [n for n in _blocked(blocked_extra) if isinstance(n, ipaddress.IPv4Network)]
    return [
        forward,
        # Every query, whichever resolver the guest asks: no DNS leaves but through ours.
        f'iifname "{TAP_NAME}" meta l4proto {{ tcp, udp }} th dport 53 '
        f"redirect to :{ports.dns}",
        f'iifname "{TAP_NAME}" ip daddr != {_set(ipaddress.collapse_addresses(blocked4))} '
        f"meta l4proto tcp redirect to :{ports.proxy}",
    ]


def _input_rules(policy: EgressPolicy, ports: EgressPorts) -> list[str]:
    accept = [f'iifname "{TAP_NAME}" ct state established,related accept',
              # The volume relay (volumes/relay.py): the guest's NFS client, to exactly the
              # gateway's port 2049 (no redirect takes it: the link-local range is blocked).
              f'iifname "{TAP_NAME}" ip daddr {GATEWAY_IP} tcp dport {VOLUME_RELAY_PORT} '
              "ct state new accept"]
    if policy.needs_proxy:
        # Only flows our redirect made: the guest cannot open the listeners directly.
        accept.append(f'iifname "{TAP_NAME}" ct status dnat meta l4proto {{ tcp, udp }} '
                      f"th dport {{ {ports.proxy}, {ports.dns} }} accept")
    return [*accept, f'iifname "{TAP_NAME}" drop']


def _blocked(blocked_extra: Iterable[str]) -> list[IPNetwork]:
    return [*parse_cidrs(ALWAYS_BLOCKED), *parse_cidrs(blocked_extra)]


def render_egress_rules(policy: EgressPolicy, blocked_extra: Iterable[str]) -> list[str]:
    """Rules for guest-originated new connections, the address half of ``decide``: blocked
    ranges first (no allow entry can reopen them), then allow (wins over deny, as E2B's), then
    deny, then what neither lists: dropped when the policy denies all (IPv6 too: a guest has
    none), else accepted."""
    rules = [*_match_rules(_blocked(blocked_extra), "drop"),
             *_match_rules(list(policy.rules.allow_nets), "accept")]
    if policy.needs_proxy:  # what the resolver answered for an allowed name, until its TTL
        rules += [f"ip daddr @{RESOLVED4} accept", f"ip6 daddr @{RESOLVED6} accept"]
    if policy.rules.denies_unlisted:
        return [*rules, "drop"]
    return [*rules, *_match_rules(list(policy.rules.deny_nets), "drop"), "accept"]


def _match_rules(networks: list[IPNetwork], verdict: str) -> list[str]:
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    rules = []
    if v4:
        rules.append(f"ip daddr {_set(ipaddress.collapse_addresses(v4))} {verdict}")
    if v6:
        rules.append(f"ip6 daddr {_set(ipaddress.collapse_addresses(v6))} {verdict}")
    return rules


def _set(networks: Iterable[IPNetwork]) -> str:
    # Collapsed first: an anonymous interval set rejects overlapping elements.
    return "{ " + ", ".join(str(n) for n in networks) + " }"


def _indent(rules: list[str]) -> list[str]:
    return [f"    {rule}" for rule in rules]
