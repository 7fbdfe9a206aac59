"""What one slot enforces: a sandbox's egress policy as the node carries it.

The policy's meaning (precedence, names, rules, proxy) is ``aenv_common.egress``'s, shared with
the gateway and the egress process; this module only binds it to the node: the record's
``cluster.v1.NetworkPolicy`` (handed to the egress process as is), the rules parsed from it
(rendered to nft), and the key id whose secrets its header rules may fill. A slot that serves no
sandbox yet (the warm pool, a template build) enforces ``EgressPolicy()``: nothing goes out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import ALWAYS_BLOCKED, EgressRules, IPNetwork
from aenv_common.errors import InvalidArgument

__all__ = ["ALWAYS_BLOCKED", "EgressPolicy", "IPNetwork", "parse_cidrs"]


def _closed() -> cluster_pb2.NetworkPolicy:
    return cluster_pb2.NetworkPolicy(allow_internet_access=False)


@dataclass(frozen=True)
class EgressPolicy:
    """Equal policies enforce the same thing (the proto's ingress-only fields do not count)."""

    network: cluster_pb2.NetworkPolicy = field(default_factory=_closed, compare=False, repr=False)
    owner_key_id: str = ""
    rules: EgressRules = field(init=False)

    def __post_init__(self) -> None:
        """:raise InvalidArgument: the policy holds an entry no node may enforce."""
        object.__setattr__(self, "rules", EgressRules.from_proto(self.network))

    @property
    def needs_proxy(self) -> bool:
        return self.rules.needs_proxy


def parse_cidrs(cidrs: Iterable[str]) -> list[IPNetwork]:
    """Parse CIDRs (or bare addresses) of the node's own configuration."""
    networks: list[IPNetwork] = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as exc:
            raise InvalidArgument(f"bad CIDR: {cidr!r}") from exc
    return networks
