"""The cluster-side checks of a network policy: the owner's secrets, the proxy's DNS, sealing."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import IPAddress
from aenv_common.egress.rules import PROXY_PASSWORD_AAD
from aenv_common.errors import InvalidArgument
from aenv_common.secrets.sealing import SecretsKey, open_sealed
from aenv_gateway.core.egress_checks import EgressChecks


class Secrets:
    def __init__(self, owned: dict[str, set[str]]) -> None:
        self.owned = owned
        self.asked: list[tuple[str, set[str]]] = []

    async def unknown_secrets(self, owner_key_id: str, names: Iterable[str]) -> list[str]:
        wanted = set(names)
        self.asked.append((owner_key_id, wanted))
        return sorted(wanted - self.owned.get(owner_key_id, set()))


DNS = {"proxy.example": ["203.0.113.9"], "inside.example": ["203.0.113.10", "10.0.0.7"]}


async def resolve(host: str, port: int) -> list[IPAddress]:
    if host not in DNS:
        raise OSError("no such name")
    return [ipaddress.ip_address(a) for a in DNS[host]]


def checks(secrets: Secrets) -> EgressChecks:
    return EgressChecks(secrets, KEY, resolve)


KEY = SecretsKey.generate()


def ruled(value: str) -> cluster_pb2.NetworkPolicy:
    return cluster_pb2.NetworkPolicy(allow_internet_access=True, rules=[cluster_pb2.NetworkRule(
        host="api.example.com",
        transforms=[cluster_pb2.HeaderTransform(set_headers={"Authorization": value})])])


async def test_placeholders_must_name_the_owners_secrets() -> None:
    secrets = Secrets({"key-a": {"openai"}})
    await checks(secrets).admit("key-a", ruled("Bearer ${e2b.secrets.openai}"))
    with pytest.raises(InvalidArgument, match=r"no secret named 'openai'"):
        await checks(secrets).admit("key-b", ruled("Bearer ${e2b.secrets.openai}"))
    assert secrets.asked == [("key-a", {"openai"}), ("key-b", {"openai"})]


def proxied(address: str) -> cluster_pb2.NetworkPolicy:
    return cluster_pb2.NetworkPolicy(egress_proxy=cluster_pb2.EgressProxy(address=address))


async def test_a_proxy_name_must_resolve_outside_the_blocked_ranges() -> None:
    gate = checks(Secrets({}))
    await gate.admit("k", proxied("Proxy.Example:1080"))
    await gate.admit("k", proxied("203.0.113.9:1080"))
    with pytest.raises(InvalidArgument) as raised:
        await gate.admit("k", proxied("inside.example:1080"))
    assert raised.value.message == (
        "network.egressProxy.address 'inside.example:1080': 'inside.example' resolves to "
        "10.0.0.7, a private or reserved address")
    with pytest.raises(InvalidArgument) as raised:
        await gate.admit("k", proxied("nowhere.example:1080"))
    assert raised.value.message == (
        "network.egressProxy.address 'nowhere.example:1080': 'nowhere.example' does not resolve")


def test_the_proxy_password_is_sealed_for_the_egress_process() -> None:
    sealed = checks(Secrets({})).seal_password("hunter2")
    assert b"hunter2" not in sealed
    assert open_sealed(KEY, sealed, PROXY_PASSWORD_AAD) == b"hunter2"
