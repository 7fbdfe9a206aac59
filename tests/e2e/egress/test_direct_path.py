"""What a real guest sends out itself, past the egress process, leaves the node: the slot and the
root netns forward and masquerade it (network/host_nat.py), here only towards the test
internet's prefixes (`Internet.node_env`). One sandbox: an IP-only allow list reaches its
address over TCP and the test dnsmasq over UDP; switched to a policy by name, UDP reaches the
allowed name's address once the platform resolver has answered it (the `resolved4` set)."""

from __future__ import annotations

import json
import shlex

import pytest
from e2b import Sandbox, SandboxNetworkUpdate

from aenv_cli.platform import Platform

from .conftest import PROBE, fetch, guest_sh, guest_with
from .internet import ALLOWED, OTHER, Internet

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

UDP_ECHO_PORT = 7  # servers.py
NO_ANSWER_S = 3


def udp_echo(sandbox: Sandbox, address: str) -> dict[str, str] | None:
    """What the test internet's UDP echo at `address` answered the guest; None: nothing."""
    script = (
        "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        f"s.settimeout({NO_ANSWER_S}); s.sendto(b'?', ({address!r}, {UDP_ECHO_PORT}))\n"
        "try: print(s.recv(200).decode())\nexcept OSError: print('null')")
    code, out = guest_sh(sandbox, f"python3 -c {shlex.quote(script)}")
    assert code == 0, out
    answer: dict[str, str] | None = json.loads(out)
    return answer


def test_a_guests_own_tcp_and_udp_leave_the_node(egress_sdk: Platform, internet: Internet) -> None:
    allowed, other = internet.addresses[ALLOWED][0], internet.addresses[OTHER][0]
    ip_only: SandboxNetworkUpdate = {
        "allow_out": [f"{allowed}/32", f"{internet.dns}/32"], "deny_out": ["0.0.0.0/0"]}
    with guest_with(ip_only, internet) as guest:
        got = fetch(guest, f"http://{allowed}/echo")
        assert got.code == 200, got
        assert json.loads(got.body)["server"] == allowed
        # UDP straight to the test's dnsmasq, allowed by its address (no platform resolver).
        code, out = guest_sh(guest, f"python3 {PROBE} dns {internet.dns} {ALLOWED} udp")
        assert (code, json.loads(out)["addresses"]) == (0, [allowed])
        assert fetch(guest, f"http://{other}/echo").code == 0  # not listed: denied

        guest.update_network({"allow_out": [ALLOWED], "deny_out": ["0.0.0.0/0"]})
        assert udp_echo(guest, allowed) is None  # not resolved yet: no address vouched for
        code, out = guest_sh(guest, f"python3 {PROBE} dns {internet.dns} {ALLOWED} udp")
        assert (code, json.loads(out)["addresses"]) == (0, [allowed])  # our resolver's answer
        echoed = udp_echo(guest, allowed)
        assert echoed is not None and echoed["server"] == allowed
        assert udp_echo(guest, other) is None
