"""A sandbox's network config by name through the unmodified SDK: a create that names bad
entries is refused (400 naming the entry) before any sandbox exists, and one that names hosts,
header rules and an egress proxy comes back from `get_info()` as given — rules materialized,
the proxy without its password or CA certificate. One sandbox; it sends no traffic."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from e2b import InvalidArgumentException, Sandbox, SandboxException, SandboxNetworkOpts, Secret
from e2b.sandbox.sandbox_api import SandboxNetworkRule

from aenv_testing.certs import self_signed_ca_pem

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

SECRET = "conf-net-" + secrets.token_hex(4)
CA = self_signed_ca_pem("conformance proxy CA")
PASSWORD = "proxy-pw-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def secret(e2b_vars: dict[str, str]) -> Iterator[str]:
    Secret.create(SECRET, "sk-" + secrets.token_hex(8))
    try:
        yield SECRET
    finally:
        Secret.destroy(SECRET)


@pytest.mark.parametrize(
    ("network", "named"),
    [
        ({"allow_out": ["exa mple.com"]}, "'exa mple.com' is not a valid domain name"),
        ({"deny_out": ["*.*.example.com"]}, "'*' is allowed only as the whole first label"),
        ({"allow_out": ["a.example"], "deny_out": ["0.0.0.0/0"],
          "rules": {"b.example": [{"transform": {"headers": {"X-A": "1"}}}]}},
         "network.rules['b.example']: the host is not in network.allowOut"),
        ({"rules": {"a.example": [{"transform": {"headers": {
            "X-Key": Secret.fill("no-such-secret-" + secrets.token_hex(4))}}}]}},
         "network.rules: no secret named 'no-such-secret-"),
        ({"rules": {"a.example": [{"transform": {"headers": {
            "Authorization": "${e2b.identity.tokens.aws}"}}}]}},
         "iam tokens are not supported on this platform"),
        ({"egress_proxy": {"address": "192.168.7.7:1080"}},
         "network.egressProxy.address '192.168.7.7:1080' is in a private or reserved range"),
        ({"allow_out": ["x.example"] * 1025}, "network.allowOut: at most 1024 entries"),
    ],
)
def test_a_create_naming_a_bad_entry_is_refused(
    e2b_vars: dict[str, str], network: SandboxNetworkOpts, named: str
) -> None:
    with pytest.raises((InvalidArgumentException, SandboxException)) as refused:
        Sandbox.create(network=network, timeout=60).kill()
    assert named in str(refused.value)


def test_names_rules_and_proxy_come_back_from_get_info(secret: str) -> None:
    rules: dict[str, list[SandboxNetworkRule]] = {"api.example.com": [
        {"transform": {"headers": {"Authorization": f"Bearer {Secret.fill(secret)}"}}},
    ]}
    network: SandboxNetworkOpts = {
        "allow_out": ["api.example.com", "*.pkg.example"],
        "deny_out": ["0.0.0.0/0", "tracker.example"],
        "dns_servers": ["203.0.113.53"],
        "rules": rules,
        "egress_proxy": {"address": "203.0.113.77:1080", "username": "user",
                         "password": PASSWORD,
                         "tls": {"server_name": "proxy.example", "ca_cert": CA}},
    }
    sandbox = Sandbox.create(network=network, timeout=120, request_timeout=300)
    try:
        info = sandbox.get_info().network
    finally:
        sandbox.kill()
    assert info is not None
    assert info["allow_out"] == ["api.example.com", "*.pkg.example"]
    assert info["deny_out"] == ["0.0.0.0/0", "tracker.example"]
    assert info["dns_servers"] == ["203.0.113.53"]
    assert info["rules"] == rules
    assert info["egress_proxy"] == {"address": "203.0.113.77:1080", "username": "user",
                                    "tls": {"server_name": "proxy.example"}}
    assert PASSWORD not in repr(info) and CA.splitlines()[1] not in repr(info)
