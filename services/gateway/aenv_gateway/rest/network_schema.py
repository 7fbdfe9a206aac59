"""E2B's sandbox network config <-> NetworkPolicy: SandboxNetworkConfig on create,
SandboxNetworkUpdateConfig on `PUT /sandboxes/{id}/network`, and the `network` of sandbox info.

Every field is honoured or refused with a 400 naming it, never dropped (docs/e2b-compatibility.md).
The JSON is only reshaped here; what the entries mean and which are valid is
``aenv_common.egress`` (the node parses the stored policy with the same code). An egress
proxy's password is sealed with the platform secrets key on the way in and never presented;
nor is its CA certificate. The checks that need the cluster (the owner's secrets, the proxy's
DNS) are ``egress_checks``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import EgressRules
from aenv_common.egress.rules import MAX_PROXY_CREDENTIAL
from aenv_common.errors import InvalidArgument
from aenv_common.sandbox_routing import ENVD_PORT
from aenv_gateway.rest.json_fields import json_field, json_strings

_MAX_PORT = 65535
_RULE_KEYS = frozenset({"transform"})
_TRANSFORM_KEYS = frozenset({"headers", "addHeaders", "removeHeaders"})
_PROXY_KEYS = frozenset({"address", "username", "password", "tls"})
_TLS_KEYS = frozenset({"enabled", "serverName", "caCert"})

# Seals an egress proxy's password (egress_checks.EgressChecks.seal_password).
PasswordSealer = Callable[[str], bytes]


def parse_network(body: Mapping[str, Any], seal: PasswordSealer) -> cluster_pb2.NetworkPolicy:
    """`allow_internet_access` and `network` of NewSandbox(V2)."""
    network = json_field(body, "network", dict) or {}
    policy = _egress_policy(json_field(body, "allow_internet_access", bool), network, seal)
    policy.private_traffic = json_field(network, "allowPublicTraffic", bool) is False
    policy.mask_request_host = json_field(network, "maskRequestHost", str) or ""
    policy.https_ports.extend(_https_ports(network))
    return policy


def parse_network_update(
    body: Mapping[str, Any], seal: PasswordSealer
) -> cluster_pb2.NetworkPolicy:
    """SandboxNetworkUpdateConfig: a full replacement of the egress rules, omitted ones cleared
    (the ingress settings of create are not part of it: the node keeps them)."""
    return _egress_policy(json_field(body, "allow_internet_access", bool), body, seal)


def _egress_policy(
    allow_internet: bool | None, network: Mapping[str, Any], seal: PasswordSealer
) -> cluster_pb2.NetworkPolicy:
    policy = cluster_pb2.NetworkPolicy(
        allow_internet_access=allow_internet is not False,
        internet_access_explicit=allow_internet is not None,
        allow_out=_entries(network, "allowOut"),
        deny_out=_entries(network, "denyOut"),
        dns_servers=json_strings(network, "dnsServers"),
        rules=_rules(network),
    )
    if allow_internet is False and "0.0.0.0/0" not in policy.deny_out:
        policy.deny_out.append("0.0.0.0/0")
    proxy = json_field(network, "egressProxy", dict)
    if proxy is not None:
        policy.egress_proxy.CopyFrom(_egress_proxy(proxy, seal))
    EgressRules.from_proto(policy)  # every entry, naming the first bad one
    return policy


def _entries(network: Mapping[str, Any], name: str) -> list[str]:
    try:
        return json_strings(network, name)
    except InvalidArgument as exc:
        raise InvalidArgument(f"network.{exc.message}") from exc


def _rules(network: Mapping[str, Any]) -> list[cluster_pb2.NetworkRule]:
    """`{host: [{"transform": {"headers": {...}}}]}`; one HeaderTransform per rule."""
    rules = json_field(network, "rules", dict) or {}
    return [cluster_pb2.NetworkRule(host=host, transforms=_host_rules(host, items))
            for host, items in rules.items()]


def _host_rules(host: str, items: object) -> list[cluster_pb2.HeaderTransform]:
    where = f"network.rules[{host!r}]"
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise InvalidArgument(f"{where} must be an array of rule objects")
    return [_transform(item, where) for item in items]


def _transform(rule: Mapping[str, Any], where: str) -> cluster_pb2.HeaderTransform:
    _known_keys(rule, _RULE_KEYS, where)
    transform = rule.get("transform") or {}
    if not isinstance(transform, dict):
        raise InvalidArgument(f"{where}.transform must be an object")
    _known_keys(transform, _TRANSFORM_KEYS, f"{where}.transform")
    removed = transform.get("removeHeaders") or []
    if not isinstance(removed, list) or not all(isinstance(n, str) for n in removed):
        raise InvalidArgument(f"{where}.transform.removeHeaders must be an array of strings")
    return cluster_pb2.HeaderTransform(
        set_headers=_headers(transform, "headers", where),
        add_headers=_headers(transform, "addHeaders", where),
        remove_headers=removed,
    )


def _headers(transform: Mapping[str, Any], name: str, where: str) -> dict[str, str]:
    headers = transform.get(name) or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise InvalidArgument(f"{where}.transform.{name} must map header names to strings")
    return dict(headers)


def _egress_proxy(proxy: Mapping[str, Any], seal: PasswordSealer) -> cluster_pb2.EgressProxy:
    """SandboxEgressProxyConfig (`tls` is `{enabled, serverName?, caCert?}` on the wire)."""
    where = "network.egressProxy"
    _known_keys(proxy, _PROXY_KEYS, where)
    address = json_field(proxy, "address", str)
    if not address:
        raise InvalidArgument(f"{where}.address is required (host:port)")
    username = _field(proxy, "username", str, where) or ""
    password = _field(proxy, "password", str, where) or ""
    if len(password.encode()) > MAX_PROXY_CREDENTIAL:
        raise InvalidArgument(f"{where}.password is longer than {MAX_PROXY_CREDENTIAL} bytes")
    if password and not username:
        raise InvalidArgument(f"{where}.password needs a username")
    result = cluster_pb2.EgressProxy(address=address, username=username)
    _tls(proxy.get("tls"), result, where)
    if password:
        result.sealed_password = seal(password)
    return result


def _tls(tls: object, proxy: cluster_pb2.EgressProxy, where: str) -> None:
    if tls is None:
        return
    if not isinstance(tls, dict):
        raise InvalidArgument(f"{where}.tls must be an object")
    _known_keys(tls, _TLS_KEYS, f"{where}.tls")
    enabled = _field(tls, "enabled", bool, f"{where}.tls")
    if enabled is None:
        raise InvalidArgument(f"{where}.tls.enabled is required")
    server_name = _field(tls, "serverName", str, f"{where}.tls") or ""
    ca_cert = _field(tls, "caCert", str, f"{where}.tls") or ""
    if enabled is False and (server_name or ca_cert):
        raise InvalidArgument(f"{where}.tls: serverName and caCert need enabled: true")
    proxy.tls, proxy.tls_server_name, proxy.tls_ca_cert = enabled, server_name, ca_cert


def _field(body: Mapping[str, Any], name: str, kind: type[Any], where: str) -> Any:
    try:
        return json_field(body, name, kind)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}.{exc.message}") from exc


def _known_keys(body: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    """An unknown key would be a field silently dropped (a typo of a header rule, say)."""
    unknown = sorted(set(body) - known)
    if unknown:
        raise InvalidArgument(f"{where}: unknown field {unknown[0]!r}")


def _https_ports(network: Mapping[str, Any]) -> list[int]:
    """Guest ports the data plane reaches over TLS; envd's port is always plain HTTP (E2B refuses
    it too)."""
    ports = json_field(network, "httpsPorts", list) or []
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= _MAX_PORT:
            raise InvalidArgument(f"network.httpsPorts must hold ports 1..{_MAX_PORT}")
        if port == ENVD_PORT:
            raise InvalidArgument(f"network.httpsPorts cannot list the envd port {ENVD_PORT}")
    return sorted(set(ports))


def present_network(network: cluster_pb2.NetworkPolicy) -> dict[str, Any]:
    """SandboxNetworkConfig of sandbox info: rules as given, the proxy without its password or
    CA certificate."""
    body: dict[str, Any] = {
        "allowPublicTraffic": not network.private_traffic,
        "allowOut": list(network.allow_out),
        "denyOut": list(network.deny_out),
        "dnsServers": list(network.dns_servers),
    }
    if network.rules:
        body["rules"] = {rule.host: [_present_transform(t) for t in rule.transforms]
                         for rule in network.rules}
    if network.HasField("egress_proxy"):
        body["egressProxy"] = _present_proxy(network.egress_proxy)
    if network.mask_request_host:
        body["maskRequestHost"] = network.mask_request_host
    if network.https_ports:
        body["httpsPorts"] = list(network.https_ports)
    return body


def _present_transform(transform: cluster_pb2.HeaderTransform) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    if transform.set_headers:
        shown["headers"] = dict(transform.set_headers)
    if transform.add_headers:
        shown["addHeaders"] = dict(transform.add_headers)
    if transform.remove_headers:
        shown["removeHeaders"] = list(transform.remove_headers)
    return {"transform": shown} if shown else {}


def _present_proxy(proxy: cluster_pb2.EgressProxy) -> dict[str, Any]:
    shown: dict[str, Any] = {"address": proxy.address}
    if proxy.username:
        shown["username"] = proxy.username
    if proxy.tls:
        shown["tls"] = {"enabled": True}
        if proxy.tls_server_name:
            shown["tls"]["serverName"] = proxy.tls_server_name
    return shown



def present_internet_access(network: cluster_pb2.NetworkPolicy) -> bool | None:
    """SandboxDetail.allowInternetAccess: null when the create did not say (as E2B's)."""
    return network.allow_internet_access if network.internet_access_explicit else None
