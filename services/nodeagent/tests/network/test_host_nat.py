"""The root netns's forwarding table of a slot pool, rendered (pure)."""

from __future__ import annotations

import ipaddress

from aenv_nodeagent.network import NetworkConfig
from aenv_nodeagent.network.host_nat import HostNat

CONFIG = NetworkConfig(prefix="aenv", pool_cidr="10.211.0.0/16")


def chain(text: str, name: str) -> list[str]:
    body = text[text.index(f"  chain {name} {{"):]
    return [line.strip() for line in body[:body.index("\n  }")].splitlines()[1:]]


def nat(*destinations: str) -> HostNat:
    return HostNat.of(CONFIG, [ipaddress.IPv4Network(d) for d in destinations])


def test_the_pool_reaches_only_the_destinations_and_never_a_blocked_range() -> None:
    text = nat("198.51.100.0/24", "203.0.113.0/25", "203.0.113.128/25").render()
    assert chain(text, "forward") == [
        "type filter hook forward priority filter; policy accept;",
        "ip saddr 10.211.0.0/16 jump from_guests",
        "ip daddr 10.211.0.0/16 ct state established,related accept",
        "ip daddr 10.211.0.0/16 drop",
    ]
    assert chain(text, "from_guests") == [
        'iifname != "aenv*" drop',
        "ct state established,related accept",
        "ip daddr { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, "
        "172.16.0.0/12, 192.168.0.0/16, 224.0.0.0/3 } drop",
        "ip daddr { 198.51.100.0/24, 203.0.113.0/24 } accept",  # collapsed
        "drop",
    ]


def test_the_pool_leaves_masqueraded_by_any_link_but_a_slots() -> None:
    assert chain(nat("0.0.0.0/0").render(), "postrouting") == [
        "type nat hook postrouting priority srcnat; policy accept;",
        'ip saddr 10.211.0.0/16 oifname != "aenv*" masquerade',
    ]


def test_no_destinations_forward_nothing_of_the_pool() -> None:
    rules = chain(nat().render(), "from_guests")
    assert not any("accept" in rule and "established" not in rule for rule in rules)
    assert rules[-1] == "drop"


def test_a_pool_outside_the_blocked_ranges_is_never_a_destination() -> None:
    config = NetworkConfig(prefix="aenv", pool_cidr="198.18.128.0/20")
    text = HostNat.of(config, [ipaddress.IPv4Network("0.0.0.0/0")]).render()
    assert "198.18.128.0/20" in chain(text, "from_guests")[2]


def test_the_table_is_replaced_whole_and_removed_without_failing_when_absent() -> None:
    text = nat("0.0.0.0/0").render()
    assert text.startswith("table ip aenv_nat_aenv {}\ndelete table ip aenv_nat_aenv\n"
                           "table ip aenv_nat_aenv {\n")
    assert nat().render_removal() == ("table ip aenv_nat_aenv {}\n"
                                      "delete table ip aenv_nat_aenv\n")
