"""The checks of a sandbox's egress policy that need more than its text, made before a create or
an `update_network` reaches a node (so nothing is half-applied when one fails):

- every `${e2b.secrets.<name>}` placeholder names a secret of the sandbox's owner key (a secret
  destroyed later is the node's business: the request is then answered 403);
- an egress proxy given by name resolves, and only outside the always-blocked ranges (the proxy
  must not bridge a sandbox into the platform's own networks; the node's dialer checks the
  address again at every dial, against DNS changes since);
- the proxy password is sealed with the platform secrets key, which only the node's egress
  process opens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import EgressRules, IPAddress, is_blocked, placeholders
from aenv_common.egress.rules import PROXY_PASSWORD_AAD
from aenv_common.errors import InvalidArgument
from aenv_common.secrets.sealing import SecretsKey, seal

# A name's addresses (the gateway's system resolver in production).
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


class SecretNames(Protocol):
    async def unknown_secrets(self, owner_key_id: str, names: Iterable[str]) -> list[str]: ...


async def system_resolve(host: str, port: int) -> list[IPAddress]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


class EgressChecks:
    def __init__(
        self, secrets: SecretNames, key: SecretsKey, resolve: Resolver = system_resolve
    ) -> None:
        self._secrets = secrets
        self._key = key
        self._resolve = resolve

    def seal_password(self, password: str) -> bytes:
        return seal(self._key, password.encode(), PROXY_PASSWORD_AAD)

    async def admit(self, owner_key_id: str, network: cluster_pb2.NetworkPolicy) -> None:
        """:raise InvalidArgument: naming the unknown secret or the unusable proxy."""
        rules = EgressRules.from_proto(network)
        unknown = await self._secrets.unknown_secrets(owner_key_id, placeholders(rules))
        if unknown:
            raise InvalidArgument(
                f"network.rules: no secret named {unknown[0]!r} (a placeholder "
                f"${{e2b.secrets.{unknown[0]}}} must name a secret of the creating API key)")
        if rules.proxy is not None:
            await self._check_proxy_host(rules.proxy.host, rules.proxy.port, rules.proxy.address)

    async def _check_proxy_host(self, host: str, port: int, address: str) -> None:
        where = f"network.egressProxy.address {address!r}"
        try:
            ipaddress.ip_address(host)
            return  # a literal was checked with the policy
        except ValueError:
            pass
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise InvalidArgument(f"{where}: {host!r} does not resolve") from exc
        if not addresses:
            raise InvalidArgument(f"{where}: {host!r} does not resolve")
        for resolved in addresses:
            if is_blocked(resolved):
                raise InvalidArgument(
                    f"{where}: {host!r} resolves to {resolved}, a private or reserved address")
