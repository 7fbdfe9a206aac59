"""Egress by name at the API: domains, header rules and an egress proxy are accepted, stored
whole and reported back (the proxy without its password or CA), every bad entry is a 400 naming
it, and a refused create or update changes nothing."""

from __future__ import annotations

from typing import Any

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.keys.auth import ADMIN_KEY_ID
from aenv_testing.certs import self_signed_ca_pem

from .conftest import API_KEY, Stack

AUTH = {"X-API-Key": API_KEY}
CA = self_signed_ca_pem("proxy CA")
NETWORK: dict[str, Any] = {
    "allowOut": ["api.example.com", "*.pkg.example", "198.51.100.0/24"],
    "denyOut": ["0.0.0.0/0", "bad.example"],
    "dnsServers": ["203.0.113.53"],
    "rules": {
        "api.example.com": [
            {"transform": {"headers": {"Authorization": "Bearer ${e2b.secrets.openai}"}}},
            {"transform": {"addHeaders": {"X-Trace": "1"}, "removeHeaders": ["Cookie"]}},
            {},
        ],
    },
    "egressProxy": {"address": "203.0.113.9:1080", "username": "u", "password": "hunter2-pw",
                    "tls": {"enabled": True, "serverName": "proxy.example", "caCert": CA}},
}


async def _create(http: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base", **body})


async def test_names_rules_and_proxy_round_trip_without_the_proxy_secrets(stack: Stack) -> None:
    await stack.gateway.secrets.create(ADMIN_KEY_ID, "openai", "sk-value", {})
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await _create(http, network=NETWORK)
        assert created.status_code == 201, created.text
        spec = stack.nodeagent.specs[-1]
        assert list(spec.network.allow_out) == NETWORK["allowOut"]
        assert spec.network.egress_proxy.sealed_password  # sealed, never in clear
        assert b"hunter2-pw" not in spec.SerializeToString()
        detail = (await http.get(f"/sandboxes/{created.json()['sandboxID']}", headers=AUTH))
    network = detail.json()["network"]
    assert network["allowOut"] == NETWORK["allowOut"]
    assert network["denyOut"] == NETWORK["denyOut"]
    assert network["rules"] == NETWORK["rules"]
    assert network["egressProxy"] == {"address": "203.0.113.9:1080", "username": "u",
                                      "tls": {"enabled": True, "serverName": "proxy.example"}}
    assert "hunter2-pw" not in detail.text and CA.splitlines()[1] not in detail.text


BAD: list[tuple[dict[str, Any], str]] = [
    ({"allowOut": ["api.*.example.com"]},
     "network.allowOut entry 'api.*.example.com' is not a valid domain name: '*' is allowed "
     "only as the whole first label ('*.example.com')"),
    ({"denyOut": ["-bad.example"]},
     "network.denyOut entry '-bad.example' is not a valid domain name: label '-bad' is not "
     "letters, digits and inner hyphens"),
    ({"allowOut": ["ok.example"] * 1025}, "network.allowOut: at most 1024 entries are accepted"),
    ({"allowOut": "api.example.com"}, "network.allowOut must be of type array"),
    ({"allowOut": ["a.example"], "denyOut": ["0.0.0.0/0"],
      "rules": {"b.example": [{"transform": {"headers": {"X-A": "1"}}}]}},
     "network.rules['b.example']: the host is not in network.allowOut, and the policy denies "
     "everything else"),
    ({"rules": {"a.example": [{"transform": {"headers": {"X-Key": "${e2b.secrets.missing}"}}}]}},
     "network.rules: no secret named 'missing' (a placeholder ${e2b.secrets.missing} must name "
     "a secret of the creating API key)"),
    ({"rules": {"a.example": [{"transform": {"headers": {
        "Authorization": "${e2b.identity.tokens.aws}"}}}]}},
     "network.rules['a.example']: header 'Authorization' uses workload identity placeholder "
     "'${e2b.identity.tokens.aws}': iam tokens are not supported on this platform (it has no "
     "identity provider)"),
    ({"rules": {"a.example": [{"transform": {"header": {"X-A": "1"}}}]}},
     "network.rules['a.example'].transform: unknown field 'header'"),
    ({"rules": {"a.example": {"transform": {}}}},
     "network.rules['a.example'] must be an array of rule objects"),
    ({"egressProxy": {"address": "10.1.2.3:1080"}},
     "network.egressProxy.address '10.1.2.3:1080' is in a private or reserved range"),
    ({"egressProxy": {"address": "203.0.113.9"}},
     "network.egressProxy.address '203.0.113.9' is not host:port with a port 1..65535"),
    ({"egressProxy": {"address": "203.0.113.9:1080", "password": "p"}},
     "network.egressProxy.password needs a username"),
    ({"egressProxy": {"address": "203.0.113.9:1080", "tls": {"enabled": False,
                                                             "serverName": "x.example"}}},
     "network.egressProxy.tls: serverName and caCert need enabled: true"),
    ({"dnsServers": ["2001:db8::1"]},
     "network.dnsServers entry '2001:db8::1' is not an IPv4 address"),
]


@pytest.mark.parametrize(("network", "message"), BAD)
async def test_a_bad_entry_is_a_400_naming_it_at_create_and_update(
    stack: Stack, network: dict[str, Any], message: str
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        created = await _create(http, network={"allowOut": ["keep.example"]})
        sid = created.json()["sandboxID"]
        specs = len(stack.nodeagent.specs)
        refused = await _create(http, network=network)
        assert (refused.status_code, refused.json()["message"]) == (400, message)
        assert len(stack.nodeagent.specs) == specs  # no create reached a node
        update = await http.put(f"/sandboxes/{sid}/network", headers=AUTH, json=network)
        assert (update.status_code, update.json()["message"]) == (400, message)
    assert list(stack.view.sandbox_records[sid].network.allow_out) == ["keep.example"]


async def test_an_update_replaces_names_rules_and_proxy_and_clears_what_it_omits(
    stack: Stack,
) -> None:
    await stack.gateway.secrets.create(ADMIN_KEY_ID, "openai", "sk-value", {})
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        sid = (await _create(http, network=NETWORK)).json()["sandboxID"]
        update = {"allowOut": ["*.github.com"], "denyOut": ["0.0.0.0/0"]}
        response = await http.put(f"/sandboxes/{sid}/network", headers=AUTH, json=update)
        assert response.status_code == 204, response.text
    network = stack.view.sandbox_records[sid].network
    assert list(network.allow_out) == ["*.github.com"]
    assert not network.rules and not network.HasField("egress_proxy")
    assert not network.dns_servers


async def test_the_native_api_takes_the_same_policy_with_the_same_checks(stack: Stack) -> None:
    """Names in the cluster NetworkPolicy; a proxy's sealed password and CA never come back."""
    named = cluster_pb2.NetworkPolicy(
        allow_internet_access=True, allow_out=["*.github.com"], deny_out=["0.0.0.0/0"],
        egress_proxy=cluster_pb2.EgressProxy(address="203.0.113.9:1080", username="u",
                                             sealed_password=b"opaque", tls=True, tls_ca_cert=CA))
    bad = cluster_pb2.NetworkPolicy(allow_out=["api.*.example"])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        md = (("x-api-key", API_KEY),)
        created = await stub.CreateSandbox(
            gateway_pb2.CreateSandboxRequest(template_id="base", network=named), metadata=md)
        assert list(created.sandbox.network.allow_out) == ["*.github.com"]
        assert stack.nodeagent.specs[-1].network.egress_proxy.tls_ca_cert == CA  # kept
        got = await stub.GetSandbox(
            gateway_pb2.GetSandboxRequest(sandbox_id=created.sandbox.sandbox_id), metadata=md)
        listed = await stub.ListSandboxes(gateway_pb2.ListSandboxesRequest(), metadata=md)
        for shown in (created.sandbox, got.sandbox, *listed.sandboxes):
            proxy = shown.network.egress_proxy
            assert (proxy.sealed_password, proxy.tls_ca_cert) == (b"", "")
        assert got.sandbox.network.egress_proxy.address == "203.0.113.9:1080"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateSandbox(
                gateway_pb2.CreateSandboxRequest(template_id="base", network=bad), metadata=md)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == (
        "network.allowOut entry 'api.*.example' is not a valid domain name: '*' is allowed only "
        "as the whole first label ('*.example.com')")
