"""Which URLs a webhook may be delivered to (server-side request forgery).

A webhook makes the gateway send requests where its owner says: without a rule, any key could
make it reach what only the cluster's own network reaches (etcd, node agents, a cloud's
metadata service). So a URL's host is resolved and every address it names must be a public
one, both when the webhook is registered and at each delivery (a name may resolve elsewhere
later); the delivery then connects to exactly the addresses checked (`GuardedResolver`), so a
name cannot be re-pointed between the check and the connection.

`allow_private` (the gateway's `webhooks_allow_private`: tests, a cluster whose receivers are
on its own network) lets loopback, private and link-local addresses through. The metadata
address, unspecified and multicast addresses are refused always: no receiver lives there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from aenv_common.errors import InvalidArgument

MAX_URL_LENGTH = 2048
# Cloud instance metadata (AWS, GCP, Azure, OpenStack...; AWS's IPv6 one).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("169.254.169.254"),
                                ipaddress.ip_address("fd00:ec2::254")})

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Resolves a host name to its addresses (tests give a fake; the gateway the system's).
Resolve = Callable[[str], Awaitable[list[str]]]


class TargetRefused(InvalidArgument):
    """The URL is not one a webhook may be sent to."""


async def system_resolve(host: str) -> list[str]:
    """The host's addresses by the system's resolver (the same one aiohttp uses)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as err:
        raise TargetRefused(f"webhook host {host} does not resolve ({err.strerror})") from None
    return sorted({str(info[4][0]) for info in infos})


def address_refusal(address: Address, allow_private: bool) -> str | None:
    """Why `address` is refused, or None when a webhook may be sent there."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        return "the metadata address"
    if address.is_unspecified or address.is_multicast:
        return "not a host's address"
    if allow_private:
        return None
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if not address.is_global:
        return "a private address"
    return None


class TargetPolicy:
    """Checks webhook URLs and the addresses their hosts resolve to. Without `resolve` (a
    gateway with no etcd, which has no events and sends nothing) host names are not looked up:
    the form and literal addresses are checked still."""

    def __init__(self, allow_private: bool, resolve: Resolve | None = system_resolve) -> None:
        self.allow_private = allow_private
        self._resolve = resolve

    def parse(self, url: str) -> str:
        """The URL's host, when its form is one a webhook may have (no resolution).

        :raise TargetRefused: not an absolute http(s) URL with a host."""
        if len(url) > MAX_URL_LENGTH:
            raise TargetRefused(f"url is longer than {MAX_URL_LENGTH} characters")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (validates the port)
        except ValueError:
            raise TargetRefused("url is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TargetRefused("url must be an absolute http or https URL")
        if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
            raise TargetRefused("url must not hold spaces or control characters")
        return parts.hostname

    async def check(self, url: str) -> list[str]:
        """The addresses `url`'s host resolves to, every one allowed ([] for a name when the
        policy resolves none).

        :raise TargetRefused: a bad URL, a host that does not resolve, or an address refused."""
        host = self.parse(url)
        if self._resolve is None and not _literal(host):
            return []
        try:
            addresses = [host] if _literal(host) or self._resolve is None else (
                await self._resolve(host))
        except TargetRefused:
            raise
        except OSError as err:
            raise TargetRefused(f"webhook host {host} does not resolve ({err})") from None
        if not addresses:
            raise TargetRefused(f"webhook host {host} does not resolve")
        self.check_addresses(host, addresses)
        return addresses

    def check_addresses(self, host: str, addresses: list[str]) -> None:
        for text in addresses:
            refusal = address_refusal(ipaddress.ip_address(text.split("%", 1)[0]),
                                      self.allow_private)
            if refusal is not None:
                raise TargetRefused(
                    f"webhook host {host} resolves to {text}, {refusal}; webhooks are sent to "
                    "public addresses only")


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver for deliveries: the policy's checked addresses, nothing else (an IP
    literal never reaches a resolver: the sender checks it itself)."""

    def __init__(self, policy: TargetPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self._policy.check(f"http://{_bracketed(host)}/")
        except TargetRefused as err:
            raise OSError(err.message) from None
        results: list[ResolveResult] = []
        for text in addresses:
            fam = socket.AF_INET6 if ":" in text else socket.AF_INET
            results.append({"hostname": host, "host": text, "port": port, "family": fam,
                            "proto": 0, "flags": socket.AI_NUMERICHOST})
        return results

    async def close(self) -> None:
        return None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def connector(policy: TargetPolicy) -> aiohttp.TCPConnector:
    """A connector whose every connection goes to an address the policy allows."""
    options: dict[str, Any] = {"resolver": GuardedResolver(policy), "use_dns_cache": False,
                               "limit": 0}
    return aiohttp.TCPConnector(**options)
