"""`network.egressProxy`: a sandbox's TCP egress through the test internet's real SOCKS5 server
(microsocks, user/password), then through stunnel's TLS in front of it, switched on the running
sandbox; filtering still comes first, and a proxy that refuses fails closed (no direct dial)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2b import Sandbox, SandboxNetworkUpdate

from aenv_cli.platform import Platform

from .conftest import fetch, guest_with, logged_anywhere
from .internet import ALLOWED, OTHER, SOCKS, SOCKS_USER, Internet

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


def through(internet: Internet, *, tls: bool = False, password: str = "") -> SandboxNetworkUpdate:
    proxy = {"address": internet.socks_tls_address if tls else internet.socks_address,
             "username": SOCKS_USER, "password": password or internet.socks_password}
    if tls:
        proxy["tls"] = {"server_name": SOCKS, "ca_cert": internet.ca_pem}  # type: ignore[assignment]
    return {"allow_out": [ALLOWED], "deny_out": ["0.0.0.0/0"],
            "egress_proxy": proxy}  # type: ignore[typeddict-item]


@pytest.fixture(scope="module")
def guest(egress_sdk: Platform, internet: Internet) -> Iterator[Sandbox]:
    with guest_with(through(internet), internet) as sandbox:
        yield sandbox


def proxied_to(internet: Internet, log_before: int) -> list[str]:
    """The destinations microsocks connected to since its log had `log_before` characters."""
    return [line.rsplit("connected to ", 1)[1] for line in
            internet.log("microsocks")[log_before:].splitlines() if "connected to " in line]


def test_egress_goes_through_the_socks5_proxy(guest: Sandbox, internet: Internet) -> None:
    mark = len(internet.log("microsocks"))
    for scheme in ("http", "https"):
        got = fetch(guest, f"{scheme}://{ALLOWED}/echo")
        assert got.code == 200, (scheme, got)
        seen = json.loads(got.body)
        # The server was reached from the proxy's netns, not from the node.
        assert seen["host"] == ALLOWED and seen["server"] == internet.addresses[ALLOWED][0]
    address = internet.addresses[ALLOWED][0]
    assert proxied_to(internet, mark) == [f"{address}:80", f"{address}:443"]
    # Filtering happens before the proxy: a denied name never reaches it.
    mark = len(internet.log("microsocks"))
    assert fetch(guest, f"http://{OTHER}/echo").code == 0
    assert proxied_to(internet, mark) == []
    info = guest.get_info().network
    assert info is not None
    assert info["egress_proxy"] == {"address": internet.socks_address, "username": SOCKS_USER}


def test_tls_to_the_proxy_switched_on_a_running_sandbox(guest: Sandbox, internet: Internet) -> None:
    guest.update_network(through(internet, tls=True))
    marks = len(internet.log("microsocks")), len(internet.log("stunnel"))
    got = fetch(guest, f"https://{ALLOWED}/echo")
    assert got.code == 200, got
    assert "accepted connection" in internet.log("stunnel")[marks[1]:]
    assert proxied_to(internet, marks[0]) == [f"{internet.addresses[ALLOWED][0]}:443"]


def test_a_refusing_proxy_fails_closed(
    guest: Sandbox, internet: Internet, egress_sdk: Platform
) -> None:
    before = len(internet.requests())
    guest.update_network(through(internet, password="not-the-password"))
    try:
        assert fetch(guest, f"http://{ALLOWED}/echo").code == 0
        assert internet.requests()[before:] == []
    finally:
        guest.update_network(through(internet))
    assert fetch(guest, f"http://{ALLOWED}/echo").code == 200
    # Neither password, the refused one included, is in any log of the platform's.
    for password in (internet.socks_password, "not-the-password"):
        assert logged_anywhere(egress_sdk, password) == [], password
