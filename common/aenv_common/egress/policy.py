"""A sandbox's egress policy as one value, and the one decision every enforcer makes with it.

``EgressRules.from_proto`` turns the ``cluster.v1.NetworkPolicy`` stored in the sandbox record
into a validated, immutable value (the gateway validates with it before anything is stored, the
node parses the same record again, so both refuse the same things with the same words).

Precedence (E2B's, read from its orchestrator's egress firewall and TCP proxy): an allow entry
wins over a deny entry; what neither list matches is allowed; ``allow_internet_access=false``
is ``denyOut: ["0.0.0.0/0"]``. Names are decided before addresses: a connection that names an
allowed host (TLS SNI, HTTP Host, a DNS question) is allowed only towards an address the
platform's own resolver returned for that name within its TTL (or one the allow list holds
itself), so a guest cannot borrow an allowed name to reach another address. Ranges in
``blocked.ALWAYS_BLOCKED`` are dropped by the data plane before ``decide`` is ever asked.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument

from .blocked import AddressSet, IPAddress, IPNetwork
from .names import DomainPattern, NameSet
from .rules import EgressProxy, NetworkRule, parse_proxy, parse_rules, secret_names

MAX_LIST_ENTRIES = 1024
MAX_DNS_SERVERS = 10
ALL_TRAFFIC = "0.0.0.0/0"


class Verdict(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True)
class Decision:
    """A verdict and why (for logs and metrics; never holds header values)."""

    verdict: Verdict
    reason: str

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


class NameClass(enum.Enum):
    """How a policy treats a name on its own (the resolver's question)."""

    ALLOWED = "allowed"  # named by allowOut
    DENIED = "denied"  # named by denyOut
    UNLISTED = "unlisted"  # neither: its addresses decide


@dataclass(frozen=True)
class EgressRules:
    allow_nets: tuple[IPNetwork, ...] = ()
    deny_nets: tuple[IPNetwork, ...] = ()
    allow_names: tuple[DomainPattern, ...] = ()
    deny_names: tuple[DomainPattern, ...] = ()
    dns_servers: tuple[ipaddress.IPv4Address, ...] = ()
    rules: tuple[NetworkRule, ...] = ()
    proxy: EgressProxy | None = None
    _allowed: NameSet = field(init=False, repr=False, compare=False)
    _denied: NameSet = field(init=False, repr=False, compare=False)
    _allowed_nets: AddressSet = field(init=False, repr=False, compare=False)
    _denied_nets: AddressSet = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Decisions run per connection and per DNS question: lists are matched by index.
        object.__setattr__(self, "_allowed", NameSet(self.allow_names))
        object.__setattr__(self, "_denied", NameSet(self.deny_names))
        object.__setattr__(self, "_allowed_nets", AddressSet(self.allow_nets))
        object.__setattr__(self, "_denied_nets", AddressSet(self.deny_nets))

    @classmethod
    def from_proto(cls, policy: cluster_pb2.NetworkPolicy) -> EgressRules:
        """Raises InvalidArgument naming the first bad entry."""
        allow_nets, allow_names = _parse_list(policy.allow_out, "network.allowOut")
        deny_nets, deny_names = _parse_list(policy.deny_out, "network.denyOut")
        if not policy.allow_internet_access and ipaddress.ip_network(ALL_TRAFFIC) not in deny_nets:
            deny_nets = (*deny_nets, ipaddress.ip_network(ALL_TRAFFIC))
        rules = cls(
            allow_nets=allow_nets, deny_nets=deny_nets, allow_names=allow_names,
            deny_names=deny_names, dns_servers=parse_dns_servers(policy.dns_servers),
            rules=parse_rules(policy.rules),
            proxy=parse_proxy(policy.egress_proxy) if policy.HasField("egress_proxy") else None,
        )
        for rule in rules.rules:
            _check_reachable(rules, rule)
        return rules

    @property
    def needs_proxy(self) -> bool:
        """Whether enforcing this policy takes the egress process (names, rules or a proxy);
        an IP-only policy is enforced by nft alone."""
        return bool(self.allow_names or self.deny_names or self.rules or self.proxy)

    @property
    def denies_unlisted(self) -> bool:
        """Whether traffic neither list names is denied (a deny entry covering every IPv4
        address: ``0.0.0.0/0``, which ``allow_internet_access=false`` also means)."""
        return any(net.version == 4 and net.prefixlen == 0 for net in self.deny_nets)

    def lists_address(self, address: IPAddress, *, allowed: bool) -> bool:
        """Whether the allow (``allowed``) or the deny list holds ``address``."""
        return address in (self._allowed_nets if allowed else self._denied_nets)

    def classify_name(self, name: str) -> NameClass:
        if self._allowed.matches(name):
            return NameClass.ALLOWED
        if self._denied.matches(name):
            return NameClass.DENIED
        return NameClass.UNLISTED


def decide(
    rules: EgressRules, address: IPAddress, name: str | None, address_is_names: bool
) -> Decision:
    """Whether a guest may reach ``address`` (naming ``name``, if the connection names one).

    ``address_is_names``: the platform resolver returned ``address`` for ``name`` within its
    TTL (``name`` None: for any name the policy allows)."""
    if name is not None:
        named = rules.classify_name(name)
        if named is NameClass.ALLOWED:
            if address_is_names:
                return Decision(Verdict.ALLOW, "name allowed")
            # The user allowed this address outright: naming an allowed host takes nothing away.
            if rules.lists_address(address, allowed=True):
                return Decision(Verdict.ALLOW, "address allowed")
            return Decision(Verdict.DENY, "address not resolved for name")
        if named is NameClass.DENIED:
            return Decision(Verdict.DENY, "name denied")
    if rules.lists_address(address, allowed=True):
        return Decision(Verdict.ALLOW, "address allowed")
    if name is None and address_is_names:
        return Decision(Verdict.ALLOW, "address resolved for an allowed name")
    if rules.lists_address(address, allowed=False):
        return Decision(Verdict.DENY, "address denied")
    return Decision(Verdict.ALLOW, "not listed")


def rules_for(rules: EgressRules, host: str) -> list[NetworkRule]:
    """The rules whose host matches ``host`` (a name, or an address as text), exact hosts first,
    then wildcards and ranges in policy order."""
    matching = [rule for rule in rules.rules if rule.match.matches(host)]
    return sorted(matching, key=lambda rule: rule.match.pattern is None
                  or rule.match.pattern.wildcard)


def placeholders(rules: EgressRules) -> set[str]:
    """The secret names the policy's header values use."""
    return {
        name
        for rule in rules.rules
        for transform in rule.transforms
        for value in [*transform.set_headers.values(), *transform.add_headers.values()]
        for name in secret_names(value)
    }


def parse_dns_servers(servers: Iterable[str]) -> tuple[ipaddress.IPv4Address, ...]:
    """Up to 10 IPv4 addresses (as in E2B's API)."""
    entries = list(servers)
    if len(entries) > MAX_DNS_SERVERS:
        raise InvalidArgument(f"network.dnsServers: at most {MAX_DNS_SERVERS} are accepted")
    parsed = []
    for server in entries:
        try:
            parsed.append(ipaddress.IPv4Address(server))
        except ValueError as exc:
            raise InvalidArgument(
                f"network.dnsServers entry {server!r} is not an IPv4 address") from exc
    return tuple(parsed)


def _parse_list(
    entries: Iterable[str], where: str
) -> tuple[tuple[IPNetwork, ...], tuple[DomainPattern, ...]]:
    """Split an allow or deny list into address ranges and name patterns."""
    items = list(entries)
    if len(items) > MAX_LIST_ENTRIES:
        raise InvalidArgument(f"{where}: at most {MAX_LIST_ENTRIES} entries are accepted")
    nets: list[IPNetwork] = []
    names: list[DomainPattern] = []
    for entry in items:
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        if _PORT_SCOPED.fullmatch(entry):
            raise InvalidArgument(f"{where} entry {entry!r}: entries scoped to ports are not "
                                  "supported (an entry applies to every port)")
        if _looks_like_address(entry):
            raise InvalidArgument(f"{where} entry {entry!r} is not a valid IP address or CIDR")
        try:
            names.append(DomainPattern.parse(entry))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where} entry {exc}") from exc
    return tuple(nets), tuple(names)


# E2B's orchestrator also takes `host:port` and `host:start-end` (and `[v6]:port`).
_PORT_SCOPED = re.compile(r"(\[[^\]]*\]|[^:\[\]]+):\d*(-\d+)?")


def _looks_like_address(entry: str) -> bool:
    text = entry
    return ":" in text or "/" in text or text.replace(".", "").isdigit()


def _check_reachable(rules: EgressRules, rule: NetworkRule) -> None:
    """A rule for a host the policy denies could never apply: refuse it rather than keep it."""
    where = f"network.rules[{rule.host!r}]"
    pattern, network = rule.match.pattern, rule.match.network
    if pattern is not None:
        if any(allowed.covers(pattern) for allowed in rules.allow_names):
            return
        if any(denied.covers(pattern) for denied in rules.deny_names):
            raise InvalidArgument(f"{where}: the host is denied by network.denyOut")
        if rules.denies_unlisted:
            raise InvalidArgument(
                f"{where}: the host is not in network.allowOut, and the policy denies "
                "everything else")
        return
    assert network is not None
    if _within(network, rules.allow_nets):
        return
    if _within(network, rules.deny_nets):
        raise InvalidArgument(f"{where}: the host is denied by network.denyOut")


def _within(network: IPNetwork, nets: tuple[IPNetwork, ...]) -> bool:
    return any(
        network.network_address in net and network.broadcast_address in net for net in nets
    )
