"""nftables rulesets for one slot's netns, rendered as `nft -f` text (pure, no I/O).

Inside the netns: TCP to the netns end of the veth is DNATed to the guest (same port) and
masqueraded to the tap address, so the host reaches every guest port at ``<ns_ip>:<port>`` and
replies always come back through the netns. Guest-originated traffic is filtered in the ``egress``
chain, which ``update_policy`` replaces in one nft transaction.

Before any of that, tap0's ingress admits only what the guest may send as itself (its MAC, its
IPv4 address, ARP about itself asking for its gateway): a guest's spoofed sources, forged MACs,
ARP claims, IPv6 and VLAN tags never reach routing, conntrack or the neighbour table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from .policy import ALWAYS_BLOCKED, EgressPolicy, IPNetwork, parse_cidrs
from .slots import GATEWAY_IP, GUEST_IP, GUEST_MAC, NS_VETH_NAME, TAP_NAME, NetSlot

TABLE = "aenv"
FAMILY = "inet"
NOT_THE_GUEST = "not the guest"  # the counter of what tap0's ingress dropped


def render_ruleset(slot: NetSlot, policy: EgressPolicy, blocked_extra: Iterable[str]) -> str:
    """The whole table for a fresh netns. ``blocked_extra``: addresses the guest must never
    reach besides ALWAYS_BLOCKED (the root netns's own addresses, the slot pool)."""
    return "\n".join(
        [
            f"table {FAMILY} {TABLE} {{",
            "  chain prerouting {",
            "    type nat hook prerouting priority dstnat; policy accept;",
            f'    iifname "{NS_VETH_NAME}" ip daddr {slot.ns_ip} meta l4proto tcp '
            f"dnat ip to {GUEST_IP}",
            "  }",
            "  chain postrouting {",
            "    type nat hook postrouting priority srcnat; policy accept;",
            f'    oifname "{TAP_NAME}" ct status dnat masquerade',
            "  }",
            "  chain input {",
            "    type filter hook input priority filter; policy accept;",
            f'    iifname "{TAP_NAME}" ct state established,related accept',
            f'    iifname "{TAP_NAME}" drop',
            "  }",
            "  chain forward {",
            "    type filter hook forward priority filter; policy drop;",
            "    ct state established,related accept",
            "    ct state invalid drop",
            f'    iifname "{NS_VETH_NAME}" oifname "{TAP_NAME}" ct status dnat accept',
            f'    iifname "{TAP_NAME}" jump egress',
            "  }",
            "  chain egress {",
            *_indent(render_egress_rules(policy, blocked_extra)),
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


def render_policy_update(policy: EgressPolicy, blocked_extra: Iterable[str]) -> str:
    """Replace the egress chain's rules; nft applies the file as one atomic transaction."""
    return "\n".join(
        [
            f"flush chain {FAMILY} {TABLE} egress",
            f"table {FAMILY} {TABLE} {{",
            "  chain egress {",
            *_indent(render_egress_rules(policy, blocked_extra)),
            "  }",
            "}",
            "",
        ]
    )


def render_egress_rules(policy: EgressPolicy, blocked_extra: Iterable[str]) -> list[str]:
    """Rules for guest-originated new connections, the address half of ``decide``: blocked
    ranges first (no allow entry can reopen them), then allow (wins over deny, as E2B's), then
    deny, then what neither lists: dropped when the policy denies all (IPv6 too: a guest has
    none), else accepted."""
    blocked = [*parse_cidrs(ALWAYS_BLOCKED), *parse_cidrs(blocked_extra)]
    rules = [*_match_rules(blocked, "drop"), *_match_rules(list(policy.rules.allow_nets), "accept")]
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
