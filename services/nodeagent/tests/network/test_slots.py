"""Address and name math of network slots (pure)."""

from __future__ import annotations

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.network import NetworkConfig, netns_exec_prefix
from aenv_nodeagent.network.slots import (
    index_from_host_veth,
    index_from_netns,
    slot_for,
)


def test_default_pool_holds_16384_slots() -> None:
    assert NetworkConfig().capacity == 16384


def test_slot_addresses_are_the_first_two_hosts_of_its_slash30() -> None:
    config = NetworkConfig()
    first, second, last = slot_for(config, 0), slot_for(config, 1), slot_for(config, 16383)
    assert (first.host_ip, first.ns_ip) == ("10.211.0.1", "10.211.0.2")
    assert (second.host_ip, second.ns_ip) == ("10.211.0.5", "10.211.0.6")
    assert (last.host_ip, last.ns_ip) == ("10.211.255.253", "10.211.255.254")


def test_slot_names_and_fixed_guest_side() -> None:
    slot = slot_for(NetworkConfig(prefix="aenv"), 42)
    assert (slot.netns, slot.host_veth, slot.tap) == ("aenv-42", "aenv42h", "tap0")
    assert (slot.guest_ip, slot.guest_mac) == ("169.254.0.21", "02:fc:00:00:00:15")


def test_index_outside_pool_is_rejected() -> None:
    config = NetworkConfig(pool_cidr="10.9.0.0/29")
    assert config.capacity == 2
    with pytest.raises(InvalidArgument):
        slot_for(config, 2)
    with pytest.raises(InvalidArgument):
        slot_for(config, -1)


@pytest.mark.parametrize(
    ("prefix", "pool"),
    [
        ("Aenv", "10.211.0.0/16"),  # uppercase
        ("aenv1", "10.211.0.0/16"),  # ends in a digit: index digits would blur into it
        ("aenvlongname", "10.211.0.0/16"),  # aenvlongname16383h > 15 characters
        ("aenv", "10.211.0.0/31"),  # smaller than one /30
        ("aenv", "169.254.0.0/24"),  # overlaps the guest network
        ("aenv", "10.211.0.1/16"),  # host bits set
        ("aenv", "not-a-cidr"),
    ],
)
def test_bad_config_is_rejected(prefix: str, pool: str) -> None:
    with pytest.raises(InvalidArgument):
        NetworkConfig(prefix=prefix, pool_cidr=pool)


def test_names_parse_back_to_their_index_only_for_their_prefix() -> None:
    slot = slot_for(NetworkConfig(prefix="aenv"), 307)
    assert index_from_netns("aenv", slot.netns) == 307
    assert index_from_host_veth("aenv", slot.host_veth) == 307
    assert index_from_netns("aen", slot.netns) is None
    assert index_from_netns("aenv", "aenv-07") is None
    assert index_from_netns("aenv", "aenv-x-g1") is None
    assert index_from_host_veth("aenv", "aenv307") is None


def test_netns_exec_prefix_enters_only_the_network_namespace() -> None:
    slot = slot_for(NetworkConfig(), 3)
    assert netns_exec_prefix(slot) == ["nsenter", "--net=/run/netns/aenv-3", "--"]
