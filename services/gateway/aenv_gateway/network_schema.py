"""E2B's sandbox network config <-> NetworkPolicy: SandboxNetworkConfig on create,
SandboxNetworkUpdateConfig on `PUT /sandboxes/{id}/network`, and the `network` of sandbox info.

Every field is honoured or refused with a 400 naming it, never dropped (docs/e2b-compatibility.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_common.sandbox_routing import ENVD_PORT
from aenv_gateway.json_fields import json_field, json_strings

_MAX_PORT = 65535


def parse_network(body: Mapping[str, Any]) -> cluster_pb2.NetworkPolicy:
    """`allow_internet_access` and `network` of NewSandbox(V2)."""
    network = json_field(body, "network", dict) or {}
    policy = _egress_policy(json_field(body, "allow_internet_access", bool), network)
    policy.private_traffic = json_field(network, "allowPublicTraffic", bool) is False
    policy.mask_request_host = json_field(network, "maskRequestHost", str) or ""
    policy.https_ports.extend(_https_ports(network))
    return policy


def parse_network_update(body: Mapping[str, Any]) -> cluster_pb2.NetworkPolicy:
    """SandboxNetworkUpdateConfig: a full replacement of the egress rules, omitted ones cleared
    (the ingress settings of create are not part of it: the node keeps them)."""
    return _egress_policy(json_field(body, "allow_internet_access", bool), body)


def _egress_policy(
    allow_internet: bool | None, network: Mapping[str, Any]
) -> cluster_pb2.NetworkPolicy:
    _refuse_unenforceable(network)
    policy = cluster_pb2.NetworkPolicy(
        allow_internet_access=allow_internet is not False,
        internet_access_explicit=allow_internet is not None,
        allow_out=json_strings(network, "allowOut"),
        deny_out=json_strings(network, "denyOut"),
        dns_servers=json_strings(network, "dnsServers"),
    )
    if allow_internet is False and "0.0.0.0/0" not in policy.deny_out:
        policy.deny_out.append("0.0.0.0/0")
    return policy


def _refuse_unenforceable(network: Mapping[str, Any]) -> None:
    """The SDKs send these keys empty; a sandbox asking for them must not silently go without:
    its traffic would bypass the proxy or the header rules it relies on."""
    if json_field(network, "egressProxy", dict):
        raise InvalidArgument("network.egressProxy is not supported on this platform")
    if json_field(network, "rules", dict):
        raise InvalidArgument("network.rules (header transforms) are not supported here")


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
    """SandboxNetworkConfig of sandbox info."""
    body: dict[str, Any] = {
        "allowPublicTraffic": not network.private_traffic,
        "allowOut": list(network.allow_out),
        "denyOut": list(network.deny_out),
        "dnsServers": list(network.dns_servers),
    }
    if network.mask_request_host:
        body["maskRequestHost"] = network.mask_request_host
    if network.https_ports:
        body["httpsPorts"] = list(network.https_ports)
    return body


def present_internet_access(network: cluster_pb2.NetworkPolicy) -> bool | None:
    """SandboxDetail.allowInternetAccess: null when the create did not say (as E2B's)."""
    return network.allow_internet_access if network.internet_access_explicit else None
