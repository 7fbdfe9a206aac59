"""Egress by name from a real guest, through the unmodified SDK: one sandbox allowed three names
(one a wildcard) with everything else denied, probed the ways a guest would try to get out.

Each test looks at both ends: what the guest's curl got, and whether the test internet's servers
saw the request at all (a refused connection must never reach them)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from e2b import Sandbox, SandboxNetworkUpdate

from aenv_cli.platform import Platform

from .conftest import PROBE, Fetch, fetch, guest_sh, guest_with
from .internet import ALLOWED, DENIED, OTHER, TWO, WILD, Internet

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

POLICY: SandboxNetworkUpdate = {
    "allow_out": [ALLOWED, f"*.{WILD}", TWO], "deny_out": ["0.0.0.0/0", DENIED]}


@pytest.fixture(scope="module")
def guest(egress_sdk: Platform, internet: Internet) -> Iterator[Sandbox]:
    with guest_with(POLICY, internet) as sandbox:
        yield sandbox


def reached(internet: Internet, before: int, server: str | None = None) -> list[str]:
    """Hosts the servers were asked for since request number `before` (on `server` only)."""
    return [r["host"] for r in internet.requests()[before:]
            if server is None or r["server"] == server]


def refused(got: Fetch) -> bool:
    return got.code == 0


def test_an_allowed_name_is_reachable_over_http_and_https(
    guest: Sandbox, internet: Internet
) -> None:
    before = len(internet.requests())
    for scheme in ("http", "https"):
        got = fetch(guest, f"{scheme}://{ALLOWED}/echo")
        assert got.code == 200, got
        seen = json.loads(got.body)
        assert seen["host"] == ALLOWED and seen["scheme"] == scheme
        assert seen["server"] == internet.addresses[ALLOWED][0]
    # Python's own stack, not only curl.
    code, out = guest_sh(guest, (
        "python3 -c \"import urllib.request; print(urllib.request.urlopen("
        f"'http://{ALLOWED}/echo', timeout=20).status)\""))
    assert (code, out.strip()) == (0, "200")
    assert reached(internet, before) == [ALLOWED] * 3


def test_both_addresses_of_an_allowed_name_are_reachable(
    guest: Sandbox, internet: Internet
) -> None:
    for address in internet.addresses[TWO]:
        got = fetch(guest, f"http://{TWO}/echo", "--resolve", f"{TWO}:80:{address}")
        assert got.code == 200 and json.loads(got.body)["server"] == address


def test_denied_and_unlisted_names_are_not(guest: Sandbox, internet: Internet) -> None:
    before = len(internet.requests())
    for name in (DENIED, OTHER, "nowhere.aenv-test.example"):
        assert refused(fetch(guest, f"http://{name}/echo")), name
        # Even knowing the address: the name is denied, or the address is not one the
        # platform resolved for an allowed name.
        for address in internet.addresses.get(name, [internet.unnamed]):
            got = fetch(guest, f"http://{name}/echo", "--resolve", f"{name}:80:{address}")
            assert refused(got), (name, address)
    assert reached(internet, before) == []


def test_a_wildcard_allows_names_below_it_not_itself(guest: Sandbox, internet: Internet) -> None:
    before = len(internet.requests())
    for name in (f"api.{WILD}", f"deep.er.{WILD}"):
        got = fetch(guest, f"https://{name}/echo")
        assert got.code == 200 and json.loads(got.body)["host"] == name, (name, got)
    assert refused(fetch(guest, f"http://{WILD}/echo"))
    assert reached(internet, before) == [f"api.{WILD}", f"deep.er.{WILD}"]


def test_an_allowed_name_sent_to_another_address_is_refused(
    guest: Sandbox, internet: Internet
) -> None:
    before = len(internet.requests())
    denied_address = internet.addresses[OTHER][0]
    # TLS: the allowed SNI toward a denied address.
    got = fetch(guest, f"https://{ALLOWED}/echo", "--resolve", f"{ALLOWED}:443:{denied_address}")
    assert refused(got)
    # HTTP: the allowed Host toward a denied address.
    got = fetch(guest, f"http://{denied_address}/echo", "-H", f"Host: {ALLOWED}")
    assert refused(got)
    assert reached(internet, before) == []


def test_raw_addresses_are_refused(guest: Sandbox, internet: Internet) -> None:
    before = len(internet.requests())
    for url in (f"http://{internet.unnamed}/echo", f"https://{internet.unnamed}/echo"):
        # -k: a DoH-like TLS client to a raw IP does not care whose certificate it gets.
        assert refused(fetch(guest, url, "-k")), url
    code, out = guest_sh(guest, (
        "python3 -c \"import socket; s=socket.create_connection("
        f"('{internet.unnamed}', 80), timeout=10); s.sendall(b'GET /echo HTTP/1.0\\r\\n\\r\\n');"
        " print(len(s.recv(100)))\""))
    assert code != 0 or out.strip() == "0"
    assert reached(internet, before) == []


def test_the_guest_cannot_use_another_resolver(guest: Sandbox, internet: Internet) -> None:
    """Queries to any server are answered by the platform's resolver: an unlisted name gets no
    address, wherever the guest sends the question (UDP or TCP)."""
    for transport in ("udp", "tcp"):
        for server in (internet.dns, internet.unnamed):
            code, out = guest_sh(guest, f"python3 {PROBE} dns {server} {OTHER} {transport}")
            assert code == 0
            answer = json.loads(out)
            assert answer["addresses"] == [], (server, transport, answer)
        code, out = guest_sh(guest, f"python3 {PROBE} dns {internet.dns} {ALLOWED} {transport}")
        assert json.loads(out)["addresses"] == internet.addresses[ALLOWED], transport


def test_dns_servers_are_the_sandboxs_resolvers(guest: Sandbox, internet: Internet) -> None:
    """With `dnsServers`, allowed names are resolved there: the alternative server answers the
    allowed name with the other host's address, and the guest reaches that host by the name."""
    try:
        guest.update_network({**POLICY, "dns_servers": [internet.alt_dns]})
        got = fetch(guest, f"http://{ALLOWED}/echo")
        assert got.code == 200, got
        assert json.loads(got.body)["server"] == internet.addresses[OTHER][0]
    finally:
        guest.update_network(POLICY)
    got = fetch(guest, f"http://{ALLOWED}/echo")
    assert json.loads(got.body)["server"] == internet.addresses[ALLOWED][0]
