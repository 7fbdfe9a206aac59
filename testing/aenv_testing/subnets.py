"""Address pools for tests that make network slots, picked per run.

A node agent's slots take addresses from its `net_pool_cidr` and refuse one the host has already
(another node agent's). Suites with a fixed pool therefore collide when two runs share a host — a
CI run beside a developer's, or two suites at once — and fail with "already assigned". A random
subnet of a large private range, checked against what the host has now, makes that vanishingly
unlikely.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess

# Private, and apart from the node agent's own default pool (10.211.0.0/16).
TEST_RANGE = "10.192.0.0/11"
_handed_out: list[ipaddress.IPv4Network] = []


def free_subnet(prefix_len: int, within: str = TEST_RANGE) -> str:
    """A subnet of `within` with this prefix length that overlaps no address or route of this
    host now, nor a subnet this process handed out before."""
    parent = ipaddress.IPv4Network(within)
    taken = [*_host_networks(), *_handed_out]
    count = 2 ** (prefix_len - parent.prefixlen)
    for _ in range(200):
        index = random.randrange(count)
        candidate = ipaddress.IPv4Network(
            (int(parent.network_address) + index * 2 ** (32 - prefix_len), prefix_len))
        if not any(candidate.overlaps(net) for net in taken):
            _handed_out.append(candidate)
            return str(candidate)
    raise RuntimeError(f"no free /{prefix_len} in {within}")


def _host_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for argv in (["ip", "-j", "-4", "addr"], ["ip", "-j", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout or "[]"
        for entry in json.loads(out):
            for info in entry.get("addr_info", []):
                nets.append(ipaddress.IPv4Network(
                    f"{info['local']}/{info['prefixlen']}", strict=False))
            dst = entry.get("dst")
            if dst and dst != "default" and ":" not in dst:
                nets.append(ipaddress.IPv4Network(dst, strict=False))
    return nets
