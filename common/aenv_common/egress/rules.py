"""Header rules and the egress proxy of a policy, parsed from the cluster proto and validated.

A rule names a host (a domain pattern, an IP or a CIDR) and an ordered list of header
transforms applied to every HTTP request the sandbox sends there: ``set_headers`` replace the
request's headers of those names (E2B's ``transform.headers``), ``add_headers`` append (an aenv
extension), ``remove_headers`` drop (an aenv extension). Values may hold
``${e2b.secrets.<name>}`` placeholders (the SDK's ``Secret.fill``), filled on the node at send
time from the sandbox owner's secrets. Workload identity placeholders
(``${e2b.identity.tokens.<name>}``) are refused: minting them needs an identity provider this
platform does not have.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument

from .blocked import IPAddress, IPNetwork, is_blocked
from .names import DomainPattern, canonical_name, name_problem

MAX_RULE_HOSTS = 256
MAX_TRANSFORMS = 16
MAX_HEADERS = 64
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 8192
MAX_PROXY_CREDENTIAL = 255
MAX_PROXY_CA_CERT = 8192
# The AAD the gateway seals an egress proxy's password with (the platform secrets key).
PROXY_PASSWORD_AAD = b"egress-proxy"

SECRET_PLACEHOLDER = re.compile(r"\$\{e2b\.secrets\.([^{}\x00-\x1f\x7f-\x9f]+)\}")
_ANY_PLACEHOLDER = re.compile(r"\$\{e2b\.[^}]*\}?")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Framing and hop-by-hop headers: a rule rewriting them could desynchronise the request stream.
FORBIDDEN_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
    "keep-alive", "proxy-connection", "expect",
})


def secret_names(value: str) -> list[str]:
    """The secret names a header value's placeholders use, in order."""
    return SECRET_PLACEHOLDER.findall(value)


@dataclass(frozen=True)
class HostMatch:
    """A rule's host: a domain pattern or an address range."""

    text: str
    pattern: DomainPattern | None = None
    network: IPNetwork | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> HostMatch:
        try:
            return cls(text, network=ipaddress.ip_network(text, strict=False))
        except ValueError:
            pass
        try:
            return cls(text, pattern=DomainPattern.parse(text))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from exc

    def matches(self, host: str) -> bool:
        """``host``: the connection's name, or its address as text when it has none."""
        if self.pattern is not None:
            return self.pattern.matches(host)
        try:
            address: IPAddress = ipaddress.ip_address(host)
        except ValueError:
            return False
        return self.network is not None and address in self.network


@dataclass(frozen=True)
class HeaderTransform:
    """Header edits of one rule (attribute names as in the proto)."""

    set_headers: Mapping[str, str] = field(default_factory=dict)
    add_headers: Mapping[str, str] = field(default_factory=dict)
    remove_headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkRule:
    """The transforms of one host, applied in order."""

    host: str
    match: HostMatch
    transforms: tuple[HeaderTransform, ...]


@dataclass(frozen=True)
class EgressProxy:
    """The user's SOCKS5 proxy. The password stays sealed (opened only by the node's egress
    process) and, like the CA certificate, is kept out of reprs."""

    address: str
    host: str
    port: int
    username: str = ""
    sealed_password: bytes = field(default=b"", repr=False)
    tls: bool = False
    tls_server_name: str = ""
    tls_ca_cert: str = field(default="", repr=False)


def parse_rules(rules: Iterable[cluster_pb2.NetworkRule]) -> tuple[NetworkRule, ...]:
    parsed = tuple(_parse_rule(rule) for rule in rules)
    if len(parsed) > MAX_RULE_HOSTS:
        raise InvalidArgument(f"network.rules: at most {MAX_RULE_HOSTS} hosts are accepted")
    hosts = [str(r.match.pattern or r.match.network) for r in parsed]
    for host in hosts:
        if hosts.count(host) > 1:
            raise InvalidArgument(f"network.rules: host {host!r} is listed twice")
    return parsed


def _parse_rule(rule: cluster_pb2.NetworkRule) -> NetworkRule:
    where = f"network.rules[{rule.host!r}]"
    match = HostMatch.parse(rule.host, where)
    if len(rule.transforms) > MAX_TRANSFORMS:
        raise InvalidArgument(f"{where}: at most {MAX_TRANSFORMS} rules per host are accepted")
    transforms = tuple(_parse_transform(t, where) for t in rule.transforms)
    return NetworkRule(rule.host, match, transforms)


def _parse_transform(transform: cluster_pb2.HeaderTransform, where: str) -> HeaderTransform:
    count = len(transform.set_headers) + len(transform.add_headers) + len(transform.remove_headers)
    if count > MAX_HEADERS:
        raise InvalidArgument(f"{where}: at most {MAX_HEADERS} headers per transform")
    for name, value in [*transform.set_headers.items(), *transform.add_headers.items()]:
        _check_header_name(name, where)
        _check_header_value(name, value, where)
    for name in transform.remove_headers:
        _check_header_name(name, where)
    return HeaderTransform(
        set_headers=dict(transform.set_headers),
        add_headers=dict(transform.add_headers),
        remove_headers=tuple(transform.remove_headers),
    )


def _check_header_name(name: str, where: str) -> None:
    if len(name) > MAX_HEADER_NAME or not _TOKEN.match(name):
        raise InvalidArgument(f"{where}: {name[:MAX_HEADER_NAME]!r} is not a valid header name")
    if name.lower() in FORBIDDEN_HEADERS:
        raise InvalidArgument(f"{where}: header {name!r} cannot be changed by a rule")


def _check_header_value(name: str, value: str, where: str) -> None:
    """Never echoes the value: it may hold a credential typed in clear."""
    if len(value.encode()) > MAX_HEADER_VALUE:
        raise InvalidArgument(f"{where}: the value of header {name!r} exceeds "
                              f"{MAX_HEADER_VALUE} bytes")
    if any(c in value for c in "\r\n\x00"):
        raise InvalidArgument(f"{where}: the value of header {name!r} holds a line break or NUL")
    for placeholder in _ANY_PLACEHOLDER.findall(value):
        if placeholder.startswith("${e2b.identity."):
            raise InvalidArgument(
                f"{where}: header {name!r} uses workload identity placeholder {placeholder!r}: "
                "iam tokens are not supported on this platform (it has no identity provider)")
        if not SECRET_PLACEHOLDER.fullmatch(placeholder):
            raise InvalidArgument(
                f"{where}: header {name!r} holds {placeholder!r}, which is not a placeholder "
                "this platform fills (only ${e2b.secrets.<name>})")


def parse_proxy(proxy: cluster_pb2.EgressProxy) -> EgressProxy:
    """host:port with a name or a literal outside the blocked ranges; whether a name resolves
    into them is checked by the gateway at create and by the dialer at every dial."""
    where = "network.egressProxy"
    host, port = split_host_port(proxy.address, f"{where}.address")
    if len(proxy.username.encode()) > MAX_PROXY_CREDENTIAL:
        raise InvalidArgument(f"{where}.username is longer than {MAX_PROXY_CREDENTIAL} bytes")
    if proxy.sealed_password and not proxy.username:
        raise InvalidArgument(f"{where}.password needs a username")
    if (proxy.tls_server_name or proxy.tls_ca_cert) and not proxy.tls:
        raise InvalidArgument(f"{where}.tls: a server name or CA certificate needs tls on")
    if proxy.tls_server_name and canonical_name(proxy.tls_server_name) is None:
        raise InvalidArgument(f"{where}.tls.serverName {proxy.tls_server_name!r} is not a "
                              f"valid name: {name_problem(proxy.tls_server_name)}")
    if len(proxy.tls_ca_cert.encode()) > MAX_PROXY_CA_CERT:
        raise InvalidArgument(f"{where}.tls.caCert is larger than {MAX_PROXY_CA_CERT} bytes")
    if proxy.tls_ca_cert and not _loads_as_ca(proxy.tls_ca_cert):
        raise InvalidArgument(f"{where}.tls.caCert holds no valid PEM certificate")
    return EgressProxy(
        address=proxy.address, host=host, port=port, username=proxy.username,
        sealed_password=proxy.sealed_password, tls=proxy.tls,
        tls_server_name=proxy.tls_server_name, tls_ca_cert=proxy.tls_ca_cert)


def _loads_as_ca(pem: str) -> bool:
    """Whether the proxy's TLS could trust ``pem`` (as the dialer loads it: ssl's cadata)."""
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        return False
    return True


def split_host_port(address: str, where: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``; the host is canonical (a name lower-cased)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidArgument(f"{where} {address!r} is not host:port with a port 1..65535")
    bracketed = host.startswith("[") and host.endswith("]")
    if ":" in host and not bracketed:
        raise InvalidArgument(f"{where} {address!r}: an IPv6 host goes in brackets ([::1]:1080)")
    host = host[1:-1] if bracketed else host
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        name = canonical_name(host)
        if name is None:
            raise InvalidArgument(
                f"{where} {address!r}: {host!r} is not a valid host: {name_problem(host)}"
            ) from None
        return name, int(port_text)
    if is_blocked(literal):
        raise InvalidArgument(f"{where} {address!r} is in a private or reserved range")
    return str(literal), int(port_text)
