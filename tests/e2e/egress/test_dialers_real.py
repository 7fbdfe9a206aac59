"""The egress dialers against real servers of the test internet: Debian's microsocks (RFC 1928
with RFC 1929 user/password), stunnel4 in front of it for TLS to the proxy, and HTTPS spoken
through the TLS tunnel (TLS in TLS, as the header-rule relay does through a TLS proxy)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl

import pytest

from aenv_common.errors import PermissionDenied, Unavailable
from aenv_nodeagent.egress.dialers import DirectDialer, ProxyTls, Socks5Dialer, Streams

from .internet import ALLOWED, SOCKS, SOCKS_USER, TWO, Internet

pytestmark = [pytest.mark.netns]


async def get_echo(streams: Streams, host: str) -> dict[str, object]:
    reader, writer = streams
    writer.write(f"GET /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return dict(json.loads(body))


def proxy(internet: Internet, tls: ProxyTls | None = None, password: str = "") -> Socks5Dialer:
    host, port = (internet.socks_tls_address if tls else internet.socks_address).split(":")
    return Socks5Dialer(host, int(port), SOCKS_USER, password or internet.socks_password, tls)


async def test_socks5_with_credentials_connects_by_name(internet: Internet) -> None:
    seen = await get_echo(await proxy(internet).open(TWO, 80), TWO)
    assert seen["server"] in internet.addresses[TWO]
    assert f"connected to {TWO}:80" in internet.log("microsocks")


async def test_socks5_connects_by_address(internet: Internet) -> None:
    address = ipaddress.ip_address(internet.addresses[ALLOWED][0])
    seen = await get_echo(await proxy(internet).open(address, 80), ALLOWED)
    assert seen["server"] == str(address)


async def test_socks5_refuses_a_wrong_password(internet: Internet) -> None:
    with pytest.raises(PermissionDenied, match="username/password"):
        await proxy(internet, password="wrong").open(ALLOWED, 80)


async def test_tls_to_the_proxy_then_tls_to_the_origin(internet: Internet) -> None:
    tls = ProxyTls(server_name=SOCKS, ca_cert_pem=internet.ca_pem)
    reader, writer = await proxy(internet, tls).open(ALLOWED, 443)
    origin = ssl.create_default_context(cadata=internet.ca_pem)
    await writer.start_tls(origin, server_hostname=ALLOWED)
    seen = await get_echo((reader, writer), ALLOWED)
    assert seen["scheme"] == "https" and seen["server"] == internet.addresses[ALLOWED][0]
    assert "accepted connection" in internet.log("stunnel")


async def test_tls_to_the_proxy_fails_closed_on_the_system_store(internet: Internet) -> None:
    with pytest.raises(Unavailable, match="unable to get local issuer"):
        await proxy(internet, ProxyTls(server_name=SOCKS)).open(ALLOWED, 80)


async def test_direct_dialer_reaches_a_test_host(internet: Internet) -> None:
    seen = await get_echo(await DirectDialer().open(internet.unnamed, 80), "x")
    assert seen["server"] == internet.unnamed
