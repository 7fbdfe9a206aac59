"""EgressRules from the cluster proto, and the one decision (E2B precedence: allow over deny,
unlisted allowed, names before addresses)."""

from __future__ import annotations

import ipaddress

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import (
    EgressRules,
    NameClass,
    Verdict,
    decide,
    is_blocked,
    placeholders,
    rules_for,
)
from aenv_common.errors import InvalidArgument
from aenv_testing.certs import self_signed_ca_pem


def policy(
    allow: list[str] | None = None,
    deny: list[str] | None = None,
    rules: dict[str, list[dict[str, str]]] | None = None,
    internet: bool = True,
) -> EgressRules:
    proto = cluster_pb2.NetworkPolicy(
        allow_internet_access=internet, allow_out=allow or [], deny_out=deny or [])
    for host, transforms in (rules or {}).items():
        proto.rules.add(host=host, transforms=[
            cluster_pb2.HeaderTransform(set_headers=t) for t in transforms])
    return EgressRules.from_proto(proto)


def verdict(rules: EgressRules, address: str, name: str | None, resolved: bool) -> Verdict:
    return decide(rules, ipaddress.ip_address(address), name, resolved).verdict


ALLOW, DENY = Verdict.ALLOW, Verdict.DENY
NAMED = policy(allow=["api.example.com", "*.github.com", "198.51.100.0/24"],
               deny=["0.0.0.0/0", "*.evil.example"])
OPEN_DENY = policy(deny=["203.0.113.0/24", "bad.example"])


@pytest.mark.parametrize(
    ("rules", "address", "name", "resolved", "expected"),
    [
        # An allowed name: only towards addresses our resolver gave for it.
        (NAMED, "203.0.113.5", "api.example.com", True, ALLOW),
        (NAMED, "203.0.113.5", "API.example.com.", True, ALLOW),
        (NAMED, "203.0.113.5", "api.example.com", False, DENY),
        (NAMED, "203.0.113.5", "x.y.github.com", True, ALLOW),
        (NAMED, "203.0.113.5", "github.com", True, DENY),
        # ... or towards an address the allow list holds itself (the user's own word).
        (NAMED, "198.51.100.7", "api.example.com", False, ALLOW),
        # Denied and unlisted names fall to the addresses; deny-all denies them.
        (NAMED, "203.0.113.5", "a.evil.example", True, DENY),
        (NAMED, "198.51.100.7", "a.evil.example", True, DENY),
        (NAMED, "203.0.113.5", "other.example", True, DENY),
        (NAMED, "198.51.100.7", "other.example", False, ALLOW),
        # No name (raw IP, or a protocol that names nothing).
        (NAMED, "198.51.100.7", None, False, ALLOW),
        (NAMED, "203.0.113.5", None, True, ALLOW),
        (NAMED, "203.0.113.5", None, False, DENY),
        # Nothing denies all: unlisted is allowed, denied entries are not.
        (OPEN_DENY, "192.0.2.1", None, False, ALLOW),
        (OPEN_DENY, "192.0.2.1", "whatever.example", False, ALLOW),
        (OPEN_DENY, "203.0.113.9", None, False, DENY),
        (OPEN_DENY, "192.0.2.1", "bad.example", True, DENY),
        # allowOut alone restricts nothing (E2B): it only wins over deny entries.
        (policy(allow=["198.51.100.0/24"]), "192.0.2.1", None, False, ALLOW),
        # Allow wins over deny for the same address.
        (policy(allow=["203.0.113.5"], deny=["203.0.113.0/24"]), "203.0.113.5", None, False,
         ALLOW),
        (policy(allow=["203.0.113.5"], deny=["203.0.113.0/24"]), "203.0.113.6", None, False,
         DENY),
        # allow_internet_access=false is denyOut 0.0.0.0/0, and allowOut still wins.
        (policy(internet=False), "192.0.2.1", None, False, DENY),
        (policy(internet=False, allow=["192.0.2.0/24"]), "192.0.2.1", None, False, ALLOW),
        # An allowed name wins over a denied address it resolved to.
        (policy(allow=["api.example.com"], deny=["203.0.113.0/24"]), "203.0.113.5",
         "api.example.com", True, ALLOW),
    ],
)
def test_decide(rules: EgressRules, address: str, name: str | None, resolved: bool,
                expected: Verdict) -> None:
    assert verdict(rules, address, name, resolved) is expected


def test_a_decision_says_why() -> None:
    decision = decide(NAMED, ipaddress.ip_address("203.0.113.5"), "api.example.com", False)
    assert not decision.allowed
    assert decision.reason == "address not resolved for name"


def test_names_are_classified_for_the_resolver() -> None:
    assert NAMED.classify_name("a.github.com") is NameClass.ALLOWED
    assert NAMED.classify_name("x.evil.example") is NameClass.DENIED
    assert NAMED.classify_name("else.example") is NameClass.UNLISTED
    assert NAMED.denies_unlisted and not OPEN_DENY.denies_unlisted


def test_only_names_rules_and_proxies_need_the_egress_process() -> None:
    assert not policy(allow=["1.1.1.1"], deny=["0.0.0.0/0"]).needs_proxy
    assert not policy(internet=False).needs_proxy
    assert policy(deny=["bad.example"]).needs_proxy
    assert policy(rules={"api.example.com": [{"X-A": "1"}]}).needs_proxy
    proxied = cluster_pb2.NetworkPolicy(
        allow_internet_access=True, egress_proxy=cluster_pb2.EgressProxy(address="p.example:1080"))
    assert EgressRules.from_proto(proxied).needs_proxy


def test_rules_for_a_host_exact_first_then_wildcards() -> None:
    rules = policy(
        allow=["*.example.com"], deny=["0.0.0.0/0"],
        rules={"*.example.com": [{"X-Wild": "w"}], "api.example.com": [{"X-Exact": "e"}]})
    assert [r.host for r in rules_for(rules, "API.example.com")] == [
        "api.example.com", "*.example.com"]
    assert [r.host for r in rules_for(rules, "b.example.com")] == ["*.example.com"]
    assert rules_for(rules, "example.com") == []
    by_ip = policy(rules={"203.0.113.0/24": [{"X-Ip": "1"}]})
    assert [r.host for r in rules_for(by_ip, "203.0.113.4")] == ["203.0.113.0/24"]


def test_placeholders_are_the_secret_names_used() -> None:
    rules = policy(rules={"api.example.com": [
        {"Authorization": "Bearer ${e2b.secrets.openai}",
         "X-Two": "${e2b.secrets.a}:${e2b.secrets.b-c}"},
    ]})
    assert placeholders(rules) == {"openai", "a", "b-c"}


def test_blocked_ranges() -> None:
    assert is_blocked(ipaddress.ip_address("10.1.2.3"))
    assert is_blocked(ipaddress.ip_address("::ffff:10.0.0.1"))
    assert not is_blocked(ipaddress.ip_address("203.0.113.1"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allow": ["api.*.com"]}, "network.allowOut entry 'api.*.com' is not a valid domain "
         "name: '*' is allowed only as the whole first label ('*.example.com')"),
        ({"deny": ["10.0.0.256"]}, "network.denyOut entry '10.0.0.256' is not a valid IP "
         "address or CIDR"),
        ({"deny": ["1.2.3.0/33"]}, "network.denyOut entry '1.2.3.0/33' is not a valid IP "
         "address or CIDR"),
        ({"allow": ["ok.example"] * 1025}, "network.allowOut: at most 1024 entries are accepted"),
        ({"allow": ["example.com:443"]}, "network.allowOut entry 'example.com:443': entries "
         "scoped to ports are not supported (an entry applies to every port)"),
        ({"deny": ["10.0.0.0/8:1-1024"]}, "network.denyOut entry '10.0.0.0/8:1-1024': entries "
         "scoped to ports are not supported (an entry applies to every port)"),
        ({"deny": ["[::1]:53"]}, "network.denyOut entry '[::1]:53': entries scoped to ports are "
         "not supported (an entry applies to every port)"),
        ({"allow": ["a.example"], "deny": ["0.0.0.0/0"],
          "rules": {"b.example": [{"X": "1"}]}},
         "network.rules['b.example']: the host is not in network.allowOut, and the policy "
         "denies everything else"),
        ({"deny": ["*.example.com"], "rules": {"api.example.com": [{"X": "1"}]}},
         "network.rules['api.example.com']: the host is denied by network.denyOut"),
        ({"deny": ["203.0.113.0/24"], "rules": {"203.0.113.8": [{"X": "1"}]}},
         "network.rules['203.0.113.8']: the host is denied by network.denyOut"),
        ({"rules": {"a.example": [{"Host": "x"}]}},
         "network.rules['a.example']: header 'Host' cannot be changed by a rule"),
        ({"rules": {"a.example": [{"Bad Name": "x"}]}},
         "network.rules['a.example']: 'Bad Name' is not a valid header name"),
        ({"rules": {"a.example": [{"X-A": "one\r\nX-B: two"}]}},
         "network.rules['a.example']: the value of header 'X-A' holds a line break or NUL"),
        ({"rules": {"a.example": [{"X-A": "v" * 8193}]}},
         "network.rules['a.example']: the value of header 'X-A' exceeds 8192 bytes"),
        ({"rules": {"a.example": [{"Authorization": "Bearer ${e2b.identity.tokens.aws}"}]}},
         "network.rules['a.example']: header 'Authorization' uses workload identity "
         "placeholder '${e2b.identity.tokens.aws}': iam tokens are not supported on this "
         "platform (it has no identity provider)"),
        ({"rules": {"a.example": [{"X-A": "${e2b.secret.typo}"}]}},
         "network.rules['a.example']: header 'X-A' holds '${e2b.secret.typo}', which is not "
         "a placeholder this platform fills (only ${e2b.secrets.<name>})"),
        ({"rules": {"a.*.example": [{"X-A": "1"}]}},
         "network.rules['a.*.example']: 'a.*.example' is not a valid domain name: '*' is "
         "allowed only as the whole first label ('*.example.com')"),
    ],
)
def test_bad_entries_are_refused_naming_them(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        policy(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_a_refused_header_value_is_never_echoed() -> None:
    with pytest.raises(InvalidArgument) as raised:
        policy(rules={"a.example": [{"X-Key": "sk-live-123\n"}]})
    assert "sk-live-123" not in str(raised.value)


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        (cluster_pb2.EgressProxy(address="10.0.0.5:1080"),
         "network.egressProxy.address '10.0.0.5:1080' is in a private or reserved range"),
        (cluster_pb2.EgressProxy(address="proxy.example"),
         "network.egressProxy.address 'proxy.example' is not host:port with a port 1..65535"),
        (cluster_pb2.EgressProxy(address="proxy.example:0"),
         "network.egressProxy.address 'proxy.example:0' is not host:port with a port 1..65535"),
        (cluster_pb2.EgressProxy(address="::1:1080"),
         "network.egressProxy.address '::1:1080': an IPv6 host goes in brackets ([::1]:1080)"),
        (cluster_pb2.EgressProxy(address="[::1]:1080"),
         "network.egressProxy.address '[::1]:1080' is in a private or reserved range"),
        (cluster_pb2.EgressProxy(address="p_x.example:1080"),
         "network.egressProxy.address 'p_x.example:1080': 'p_x.example' is not a valid host: "
         "label 'p_x' is not letters, digits and inner hyphens"),
        (cluster_pb2.EgressProxy(address="p.example:1080", sealed_password=b"x"),
         "network.egressProxy.password needs a username"),
        (cluster_pb2.EgressProxy(address="p.example:1080", tls_server_name="x"),
         "network.egressProxy.tls: a server name or CA certificate needs tls on"),
        (cluster_pb2.EgressProxy(address="p.example:1080", tls=True, tls_ca_cert="junk"),
         "network.egressProxy.tls.caCert holds no valid PEM certificate"),
        (cluster_pb2.EgressProxy(address="p.example:1080", tls=True, tls_ca_cert=(
            "-----BEGIN CERTIFICATE-----\nMIIBjunk\n-----END CERTIFICATE-----\n")),
         "network.egressProxy.tls.caCert holds no valid PEM certificate"),
    ],
)
def test_bad_proxies_are_refused(proxy: cluster_pb2.EgressProxy, message: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        EgressRules.from_proto(cluster_pb2.NetworkPolicy(egress_proxy=proxy))
    assert str(raised.value) == message


def test_a_proxy_keeps_its_secrets_out_of_reprs() -> None:
    ca = self_signed_ca_pem("proxy CA")
    proto = cluster_pb2.NetworkPolicy(egress_proxy=cluster_pb2.EgressProxy(
        address="Proxy.Example:1080", username="u", sealed_password=b"SEALED", tls=True,
        tls_ca_cert=ca))
    proxy = EgressRules.from_proto(proto).proxy
    assert proxy is not None and (proxy.host, proxy.port) == ("proxy.example", 1080)
    assert proxy.tls_ca_cert == ca
    assert "SEALED" not in repr(proxy) and ca.splitlines()[1] not in repr(proxy)


def test_long_lists_are_indexed_not_scanned() -> None:
    """1024-entry lists decide as the 3-entry ones do (merged ranges, name suffix sets)."""
    rules = policy(
        allow=[f"host{i}.example.com" for i in range(500)]
        + [f"198.{i // 256}.{i % 256}.0/24" for i in range(500)] + ["2001:db8::/33"],
        deny=[f"*.deny{i}.example" for i in range(1000)] + ["0.0.0.0/0"])
    assert verdict(rules, "198.1.243.9", None, False) is ALLOW
    assert verdict(rules, "198.1.244.9", None, False) is DENY
    assert verdict(rules, "2001:db8:7fff::1", None, False) is ALLOW
    assert verdict(rules, "2001:db8:8000::1", None, False) is ALLOW  # unlisted IPv6
    assert rules.classify_name("HOST499.example.com.") is NameClass.ALLOWED
    assert rules.classify_name("a.b.deny999.example") is NameClass.DENIED
    assert rules.classify_name("deny999.example") is NameClass.UNLISTED
    assert policy(allow=["*"]).classify_name("any.thing") is NameClass.ALLOWED
