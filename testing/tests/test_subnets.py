"""Per-run address pools: inside the test range, clear of the host's addresses and routes, never
handed out twice by one process."""

from __future__ import annotations

import ipaddress

from aenv_testing import subnets
from aenv_testing.subnets import TEST_RANGE, free_subnet


def test_pools_are_in_the_range_disjoint_and_clear_of_the_host() -> None:
    picked = [ipaddress.IPv4Network(free_subnet(n)) for n in (20, 24, 24, 29, 30)]
    host = subnets._host_networks()
    for index, net in enumerate(picked):
        assert net.subnet_of(ipaddress.IPv4Network(TEST_RANGE))
        assert not any(net.overlaps(other) for other in picked[index + 1:])
        assert not any(net.overlaps(other) for other in host)
    assert [net.prefixlen for net in picked] == [20, 24, 24, 29, 30]
