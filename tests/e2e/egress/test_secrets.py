"""A header rule filled from a secret (`Secret.fill`): the test server receives the value, the
guest never holds it — not in its environment, its files, /proc, nor the frames root can capture
on its own eth0 — and once the secret is destroyed the next request is not filled (the guest gets
a 403 naming the secret, and the server nothing)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest
from e2b import Sandbox, SandboxNetworkUpdate, Secret

from aenv_cli.platform import Platform

from .conftest import PROBE, fetch, guest_sh, guest_with, logged_anywhere
from .internet import ALLOWED, Internet, headers_of

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

CAPTURE = "/tmp/eth0.raw"


@pytest.fixture(scope="module")
def secret(egress_sdk: Platform) -> Iterator[tuple[str, str]]:
    name, value = f"egress-{secrets.token_hex(4)}", f"sk-{secrets.token_hex(16)}"
    Secret.create(name, value)
    try:
        yield name, value
    finally:
        Secret.destroy(name)


@pytest.fixture(scope="module")
def guest(secret: tuple[str, str], internet: Internet) -> Iterator[Sandbox]:
    name, _ = secret
    network: SandboxNetworkUpdate = {
        "allow_out": [ALLOWED],
        "deny_out": ["0.0.0.0/0"],
        "rules": {ALLOWED: [{"transform": {"headers": {
            "Authorization": f"Bearer {Secret.fill(name)}", "X-Plain": "literal"}}}]},
    }
    with guest_with(network, internet) as sandbox:
        yield sandbox


def test_the_server_sees_the_secret_and_the_guest_never_does(
    guest: Sandbox, secret: tuple[str, str], internet: Internet, egress_sdk: Platform
) -> None:
    _, value = secret
    before = len(internet.requests())
    # Capture eth0 while both requests run (plain HTTP: the header is added past eth0).
    guest_sh(guest, (f"setsid sh -c 'echo $$ > {CAPTURE}.pid; exec python3 {PROBE} capture 120 "
                     f"{CAPTURE}' >/dev/null 2>&1 & "
                     f"for _ in $(seq 50); do [ -s {CAPTURE} ] && break; sleep 0.2; done"))
    for scheme in ("http", "https"):
        got = fetch(guest, f"{scheme}://{ALLOWED}/record", "-H", "Authorization: guest's own")
        assert got.code == 200 and got.body == "ok\n", (scheme, got)
    seen = internet.requests()[before:]
    assert [r["scheme"] for r in seen] == ["http", "https"]
    for request in seen:
        # Set, not added: the guest's own header is replaced.
        assert headers_of(request, "Authorization") == [f"Bearer {value}"]
        assert headers_of(request, "X-Plain") == ["literal"]
    guest_sh(guest, f"touch {CAPTURE}.stop; while kill -0 $(cat {CAPTURE}.pid); do sleep 0.2; done")
    code, out = guest_sh(guest, f"stat -c %s {CAPTURE}")
    assert code == 0 and int(out) > 1000, "the capture saw the requests' frames"
    # Nowhere in the guest: environments, command lines, files, the frames captured.
    code, out = guest_sh(guest, f"python3 {PROBE} find {value.encode()[::-1].hex()}",
                         timeout_s=600)
    assert code == 0 and json.loads(out) == {"found": []}, out
    # Nor in any log of the platform's (debug level).
    assert logged_anywhere(egress_sdk, value) == []


def test_a_destroyed_secret_is_no_longer_filled(
    guest: Sandbox, secret: tuple[str, str], internet: Internet
) -> None:
    name, value = secret
    assert Secret.destroy(name) is True
    before = len(internet.requests())
    got = fetch(guest, f"http://{ALLOWED}/record")
    assert got.code == 403, got
    assert name in json.dumps(json.loads(got.body)) and value not in got.body
    assert internet.requests()[before:] == []
    # Created again under the same name: filled again (a new secret, a new value).
    fresh = f"sk-{secrets.token_hex(16)}"
    Secret.create(name, fresh)
    got = fetch(guest, f"http://{ALLOWED}/record")
    assert got.code == 200, got
    assert headers_of(internet.requests()[-1], "Authorization") == [f"Bearer {fresh}"]
