"""Guest isolation: from inside a sandbox, as root, nothing of the host, of another
sandbox, of private, shared, link-local or IPv6 space answers — not the platform's services, not
a listener on every host address or on the sandbox's own gateway, not a ping, not an ARP
who-has. Each probe has a control showing it would have seen an answer, and the probe table in
the attacker's netns shows its packets reached the host and none left the netns."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import urllib.request

from aenv_cli.platform import Platform
from aenv_nodeagent.network.slots import GATEWAY_IP, TAP_MAC

from .conftest import MARKS, VICTIM_GREETING, VICTIM_PORT, Guest
from .host import (
    install_probe,
    listen_tcp,
    probe_counters,
    remove_probe,
    root_addresses,
    tap_link_local,
    udp_inbox,
)

pytestmark = MARKS

# What nothing answering looks like from the guest: silence (the host drops), or the guest's own
# stack finding no neighbour or route. "refused" would be a host's stack answering.
SILENT = {"timeout", "error:113", "error:101"}
PRIVATE = ["10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1", "169.254.169.254", "169.254.0.1"]
GUEST_V6 = "2001:db8:5::2"
LOOPBACK_PORT_FRAMES = 3


def _v6(address: str) -> bool:
    return ":" in address


def _host_targets(attacker: Guest, victim: Guest) -> list[str]:
    """The root netns's addresses a guest could aim at: its public ones and the two slots' veth
    ends (other slots of other runs on this host are left out)."""
    mine = {attacker.host.host_ip, victim.host.host_ip}
    return [
        a
        for a in root_addresses()
        if a in mine or ipaddress.ip_address(a) not in ipaddress.ip_network("10.0.0.0/8")
    ]


async def _connect_from_root(host: str, port: int) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    try:
        return (await asyncio.wait_for(reader.read(64), 5)).decode()
    finally:
        writer.close()


async def test_no_host_service_listener_or_other_sandbox_answers_a_connect(
    platform: Platform, attacker: Guest, victim: Guest
) -> None:
    a, v = attacker.host, victim.host
    tap_ll = tap_link_local(a.netns)
    assert tap_ll, "the slot's tap has an IPv6 link-local address to aim at"
    p4, stop4 = await listen_tcp(None, "0.0.0.0", b"host-v4")
    p6, stop6 = await listen_tcp(None, "::", b"host-v6")
    pn, stopn = await listen_tcp(a.netns, "0.0.0.0", b"netns-v4")
    pll, stopll = await listen_tcp(a.netns, tap_ll, b"netns-ll")
    try:
        hosts = _host_targets(attacker, victim)
        services = [getattr(platform.ports, f.name) for f in dataclasses.fields(platform.ports)]
        # Controls: every listener and the victim's port answer those allowed to reach them.
        for host in hosts:
            assert await _connect_from_root(host, p6 if _v6(host) else p4) in ("host-v4", "host-v6")
        page = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://{v.ns_ip}:{VICTIM_PORT}/", timeout=30).read()
        )
        assert page.decode().strip() == VICTIM_GREETING

        targets = [[h, p6 if _v6(h) else p4] for h in hosts]
        targets += [
            [h, port]
            for h in [GATEWAY_IP, a.ns_ip, a.host_ip, *hosts]
            if not _v6(h)
            for port in services
        ]
        targets += [[GATEWAY_IP, pn], [a.ns_ip, pn], [f"{tap_ll}%eth0", pll]]
        targets += [[v.ns_ip, VICTIM_PORT], [v.host_ip, p4], [v.ns_ip, 49983]]
        targets += [[p, port] for p in PRIVATE for port in (80, 443, 49983)]
        install_probe(a.netns, [])
        # The guest gives itself a global IPv6 address and a route through the tap.
        attacker.sh(
            f"ip -6 addr add {GUEST_V6}/64 dev eth0 nodad; "
            f"ip -6 route replace default via {tap_ll} dev eth0"
        )
        results = await asyncio.to_thread(
            attacker.hostile, {"op": "connect", "targets": targets, "wait_s": 2}
        )
        counted = probe_counters(a.netns)
    finally:
        remove_probe(a.netns)
        for stop in (stop4, stop6, stopn, stopll):
            await stop()
    answered = [(t, r) for t, r in results if r not in SILENT]
    assert not answered, answered
    v4_targets = sum(1 for t in targets if not _v6(str(t[0])))
    assert counted["in-syn"] >= v4_targets, counted  # every IPv4 SYN reached the host ...
    assert counted["guest-out"] == 0 and counted["guest-out6"] == 0, counted  # ... none left
    print(f"\n{len(targets)} connects, all silent; host side: {counted}")


async def test_no_ping_and_no_arp_reaches_the_host_or_another_sandbox(
    attacker: Guest, victim: Guest
) -> None:
    a, v = attacker.host, victim.host
    tap_ll = tap_link_local(a.netns)
    hosts = _host_targets(attacker, victim)
    install_probe(a.netns, [])
    try:
        asked = [
            a.ns_ip,
            a.host_ip,
            v.ns_ip,
            v.host_ip,
            "169.254.169.254",
            *[h for h in hosts if not _v6(h)],
        ]
        pings, arps = await asyncio.to_thread(
            attacker.hostile,
            [
                {
                    "op": "ping",
                    "wait_s": 2,
                    "targets": [
                        GATEWAY_IP,
                        a.ns_ip,
                        a.host_ip,
                        v.ns_ip,
                        v.host_ip,
                        *PRIVATE,
                        *[h for h in hosts if not _v6(h)],
                        f"{tap_ll}%eth0",
                    ],
                },
                {"op": "arp", "wait_s": 2, "targets": [GATEWAY_IP, *asked]},
            ],
        )
        counted = probe_counters(a.netns)
    finally:
        remove_probe(a.netns)
    answered = [(t, r) for t, r in pings if r not in SILENT]
    assert not answered, answered
    assert isinstance(arps, dict)
    # Control: the guest's gateway answers (the guest needs it); nothing else does.
    assert arps.pop(GATEWAY_IP) == f"reply:{TAP_MAC}", arps
    assert set(arps.values()) == {"timeout"}, arps
    assert counted["in-arp"] >= len(asked) + 1 and counted["in-ip6"] > 0, counted
    assert counted["guest-out"] == 0 and counted["guest-out6"] == 0, counted
    print(f"\n{len(pings)} pings and {len(asked)} ARP who-has unanswered; host side: {counted}")


async def test_the_hosts_loopback_is_out_of_reach(attacker: Guest) -> None:
    """Frames to 127.0.0.1 handed to the gateway's MAC: neither the root netns's loopback nor
    the slot netns's own receives them."""
    a = attacker.host
    root_port, root_inbox = await udp_inbox(None, "127.0.0.1")
    ns_port, ns_inbox = await udp_inbox(a.netns, "127.0.0.1")
    install_probe(a.netns, [root_port, ns_port])
    try:
        sent = await asyncio.to_thread(
            attacker.hostile,
            {
                "op": "frames",
                "repeat": LOOPBACK_PORT_FRAMES,
                "frames": [
                    {
                        "kind": "udp4",
                        "dst_mac": TAP_MAC,
                        "src": "169.254.0.21",
                        "dst": "127.0.0.1",
                        "port": port,
                        "tag": "to-loopback",
                    }
                    for port in (root_port, ns_port)
                ],
            },
        )
        await asyncio.sleep(0.5)
        counted = probe_counters(a.netns)
    finally:
        remove_probe(a.netns)
    assert sent == 2 * LOOPBACK_PORT_FRAMES
    assert counted[f"in-{root_port}"] == LOOPBACK_PORT_FRAMES, counted  # they reached the tap
    assert counted[f"in-{ns_port}"] == LOOPBACK_PORT_FRAMES, counted
    assert root_inbox() == [] and ns_inbox() == []
    assert counted[f"out-{root_port}"] == 0 and counted[f"out-{ns_port}"] == 0, counted
