"""Rendering of the per-slot nftables ruleset and egress policy (pure)."""

from __future__ import annotations

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.network import EgressPolicy, NetworkConfig
from aenv_nodeagent.network.firewall import (
    render_egress_rules,
    render_policy_update,
    render_ruleset,
)
from aenv_nodeagent.network.slots import slot_for

from ..policies import egress

SLOT = slot_for(NetworkConfig(), 5)
PRIVATE4 = "ip daddr { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, "
PRIVATE4 += "172.16.0.0/12, 192.168.0.0/16, 224.0.0.0/3 } drop"


def test_ruleset_forwards_every_tcp_port_of_the_ns_address_to_the_guest() -> None:
    text = render_ruleset(SLOT, EgressPolicy(), [])
    assert 'iifname "veth0" ip daddr 10.211.0.22 meta l4proto tcp dnat ip to 169.254.0.21' in text
    assert 'oifname "tap0" ct status dnat masquerade' in text
    assert 'iifname "veth0" oifname "tap0" ct status dnat accept' in text
    assert "type filter hook forward priority filter; policy drop;" in text


@pytest.mark.parametrize("allow_out", [["198.51.100.7"], ["api.example.com"]])
def test_what_the_guest_sends_out_leaves_as_the_slot(allow_out: list[str]) -> None:
    """IP-only and by-name alike: the guest's own address, the same in every slot, is
    masqueraded to the slot's ns_ip on veth0 (the root netns routes replies back by it)."""
    text = render_ruleset(SLOT, egress(allow_out=allow_out), [])
    nat = text[text.index("  chain postrouting {"):text.index("  chain input {")]
    assert nat.splitlines()[2:] == [
        '    oifname "tap0" ct status dnat masquerade',
        '    oifname "veth0" ip saddr 169.254.0.21 masquerade',
        "  }",
    ]


def test_guest_may_open_nothing_towards_the_netns_itself_but_the_volume_relay() -> None:
    for policy in (egress(allow_internet=True), egress(allow_out=["example.com"])):
        text = render_ruleset(SLOT, policy, [])
        chain = text[text.index("  chain input {"):text.index("  chain forward {")]
        rules = [line.strip() for line in chain.splitlines()[2:-1]]
        assert rules[:2] == [
            'iifname "tap0" ct state established,related accept',
            'iifname "tap0" ip daddr 169.254.0.22 tcp dport 2049 ct state new accept']
        assert rules[-1] == 'iifname "tap0" drop'
        # Nothing else new: with the egress process, only the flows its redirect made.
        assert all("ct status dnat" in rule for rule in rules[2:-1])


def test_a_policy_switch_keeps_the_volume_relay_open() -> None:
    for policy in (egress(allow_internet=True), egress(allow_out=["example.com"])):
        text = render_policy_update(policy, [], SLOT)
        assert 'iifname "tap0" ip daddr 169.254.0.22 tcp dport 2049 ct state new accept' in text


def test_the_egress_redirect_leaves_the_volume_relay_alone() -> None:
    """Guest TCP is redirected to the egress proxy only when not bound for a blocked range, and
    the gateway's address is in one (link-local): NFS to the relay is never proxied."""
    text = render_ruleset(SLOT, egress(allow_out=["example.com"]), [])
    redirect = next(line for line in text.splitlines() if "redirect to :15001" in line)
    assert "ip daddr != {" in redirect and "169.254.0.0/16" in redirect


def test_only_what_the_guest_sends_as_itself_enters_from_its_tap() -> None:
    text = render_ruleset(SLOT, egress(allow_internet=True), [])
    netdev = text[text.index("table netdev aenv {") :]
    assert netdev.splitlines()[1:7] == [
        "  chain guest {",
        '    type filter hook ingress device "tap0" priority filter; policy drop;',
        "    ether saddr 02:fc:00:00:00:15 ip saddr 169.254.0.21 accept",
        "    ether saddr 02:fc:00:00:00:15 arp saddr ether 02:fc:00:00:00:15 "
        "arp saddr ip 169.254.0.21 arp daddr ip 169.254.0.22 accept",
        '    counter comment "not the guest"',
        "  }",
    ]


def test_no_internet_drops_everything_but_the_allow_list_after_the_blocked_ranges() -> None:
    rules = render_egress_rules(egress(allow_internet=False, allow_out=["1.1.1.1"]), [])
    assert rules[0] == PRIVATE4
    assert rules[1].startswith("ip6 daddr { ::/127, ::ffff:0:0/96, 64:ff9b::/96, fc00::/7")
    assert rules[2:] == ["ip daddr { 1.1.1.1/32 } accept", "drop"]
    assert render_egress_rules(EgressPolicy(), [])[2:] == ["drop"]  # a slot with no sandbox


def test_internet_without_lists_accepts_public_addresses() -> None:
    rules = render_egress_rules(egress(allow_internet=True), [])
    assert rules[0] == PRIVATE4
    assert rules[2:] == ["accept"]


def test_allow_wins_over_deny_and_the_unlisted_are_accepted() -> None:
    """E2B's precedence, as ``aenv_common.egress.decide`` has it for addresses."""
    policy = egress(True, allow_out=["8.8.8.8", "2001:db8::/32"], deny_out=["8.8.0.0/16"])
    assert render_egress_rules(policy, [])[2:] == [
        "ip daddr { 8.8.8.8/32 } accept",
        "ip6 daddr { 2001:db8::/32 } accept",
        "ip daddr { 8.8.0.0/16 } drop",
        "accept",
    ]
    deny_all = egress(True, allow_out=["8.8.8.8"], deny_out=["0.0.0.0/0"])
    assert render_egress_rules(deny_all, [])[2:] == ["ip daddr { 8.8.8.8/32 } accept", "drop"]


def test_blocked_extra_addresses_are_merged_into_the_always_blocked_set() -> None:
    rules = render_egress_rules(egress(True), ["10.211.0.0/16", "192.0.2.2", "2001:db8::1"])
    assert "192.0.2.2/32, 192.168.0.0/16" in rules[0]
    assert "10.211.0.0/16" not in rules[0]  # inside 10.0.0.0/8: an interval set rejects overlaps
    assert "2001:db8::1/128" in rules[1]


def test_policy_update_replaces_only_the_egress_chain() -> None:
    text = render_policy_update(egress(True), [])
    assert text.startswith("flush chain inet aenv egress\ntable inet aenv {\n  chain egress {\n")
    assert "hook" not in text


def test_a_policy_no_node_may_enforce_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="2001:db8::1"):
        egress(True, dns_servers=["2001:db8::1"])
    with pytest.raises(InvalidArgument, match="at most 10"):
        egress(True, dns_servers=[f"192.0.2.{i}" for i in range(11)])
    with pytest.raises(InvalidArgument, match=r"'300\.1\.1\.1' is not a valid IP address"):
        egress(True, allow_out=["300.1.1.1"])


def test_names_make_a_policy_need_the_egress_process() -> None:
    assert not egress(True, allow_out=["1.1.1.1"], deny_out=["0.0.0.0/0"]).needs_proxy
    assert egress(True, allow_out=["api.example.com"]).needs_proxy
