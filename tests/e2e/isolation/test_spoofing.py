"""Guest isolation: a guest that lies about who it is gets nothing out. Frames with
another source address (another sandbox's, a public one, its gateway's), a forged MAC, IPv6,
an address the guest gave itself, and gratuitous ARP claiming the gateway's or another
sandbox's address are sent as root from inside the guest; on the host, the probe table counts
each kind arriving at the tap and leaving the netns, beside the same traffic sent honestly,
and no neighbour table (the slot's, the victim's, the root's) learns a lie."""

from __future__ import annotations

import asyncio
import json
import shlex

from aenv_nodeagent.network.firewall import NOT_THE_GUEST, TABLE
from aenv_nodeagent.network.slots import GATEWAY_IP, GUEST_IP, GUEST_MAC, TAP_MAC

from .conftest import GUEST_SCRIPT, MARKS, Guest
from .host import (
    CRAFTED_DST,
    counters,
    install_probe,
    neighbours,
    probe_counters,
    remove_probe,
)

pytestmark = MARKS

REPEAT = 5
FORGED_MAC = "02:fc:00:00:00:99"
PUBLIC_SRC = "203.0.113.9"  # TEST-NET-3: an address the guest does not own
HONEST, OTHER_SANDBOX, PUBLIC, GATEWAY_SRC, OTHER_MAC, IPV6, OWN_IP = range(7001, 7008)


def _frames(victim: Guest) -> list[dict[str, object]]:
    udp = {"kind": "udp4", "dst_mac": TAP_MAC, "dst": CRAFTED_DST, "src": GUEST_IP}
    return [
        {**udp, "port": HONEST, "tag": "honest"},
        {**udp, "port": OTHER_SANDBOX, "src": victim.host.ns_ip},
        {**udp, "port": PUBLIC, "src": PUBLIC_SRC},
        {**udp, "port": GATEWAY_SRC, "src": GATEWAY_IP},
        {**udp, "port": OTHER_MAC, "src_mac": FORGED_MAC},
        {
            "kind": "udp6",
            "dst_mac": TAP_MAC,
            "src": "fe80::fc:ff:fe00:15",
            "dst": "2001:db8::7",
            "port": IPV6,
        },
    ]


def _dropped_by_the_node(guest: Guest) -> int:
    """Packets the node's ingress rules on the guest's tap dropped so far."""
    return counters(guest.host.netns, "netdev", TABLE)[NOT_THE_GUEST]


def _own_ip_sends(count: int) -> str:
    """The guest takes another address and sends from it through its own stack."""
    send = (
        f"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        f"s.bind(('{PUBLIC_SRC}', 0)); "
        f"[s.sendto(b'own-ip', ('{CRAFTED_DST}', {OWN_IP})) for _ in range({count})]"
    )
    return (
        f'ip addr add {PUBLIC_SRC}/32 dev eth0 && python3 -c "{send}"; '
        f"ip addr del {PUBLIC_SRC}/32 dev eth0"
    )


async def test_spoofed_sources_and_macs_never_leave_the_netns(
    attacker: Guest, victim: Guest
) -> None:
    a = attacker.host
    ports = [HONEST, OTHER_SANDBOX, PUBLIC, GATEWAY_SRC, OTHER_MAC, IPV6, OWN_IP]
    install_probe(a.netns, ports)
    dropped = _dropped_by_the_node(attacker)
    try:
        plan = json.dumps({"op": "frames", "repeat": REPEAT, "frames": _frames(victim)})
        out = await asyncio.to_thread(
            attacker.sh, f"python3 {GUEST_SCRIPT} {shlex.quote(plan)}; {_own_ip_sends(REPEAT)}"
        )
        sent = json.loads(out.splitlines()[0])
        await asyncio.sleep(0.5)
        counted = probe_counters(a.netns)
        dropped = _dropped_by_the_node(attacker) - dropped
    finally:
        remove_probe(a.netns)
    assert sent == 6 * REPEAT
    arrived = {port: counted[f"in-{port}"] for port in ports}
    left = {port: counted[f"out-{port}"] for port in ports}
    print(f"\narrived at the tap: {arrived}\nleft the netns: {left}\ndropped at tap0: {dropped}")
    assert all(n == REPEAT for n in arrived.values()), arrived  # every kind reached the host
    assert left[HONEST] == REPEAT, left  # the control: the same frame, honest, goes out
    assert {p: n for p, n in left.items() if p != HONEST} == dict.fromkeys(ports[1:], 0), left
    assert dropped >= (len(ports) - 1) * REPEAT  # by the node's own rules, at tap0's ingress


async def test_gratuitous_arp_poisons_no_neighbour_table(attacker: Guest, victim: Guest) -> None:
    a, v = attacker.host, victim.host
    claims = [GATEWAY_IP, v.ns_ip, v.host_ip, a.host_ip, a.ns_ip]
    garps = [{"kind": "garp", "claim": ip} for ip in claims]
    garps += [{"kind": "garp", "claim": ip, "src_mac": FORGED_MAC} for ip in [GATEWAY_IP, GUEST_IP]]
    install_probe(a.netns, [])
    dropped = _dropped_by_the_node(attacker)
    try:
        sent = await asyncio.to_thread(
            attacker.hostile, {"op": "frames", "repeat": REPEAT, "frames": garps}
        )
        await asyncio.sleep(0.5)
        counted = probe_counters(a.netns)
        dropped = _dropped_by_the_node(attacker) - dropped
        tables = {
            "attacker netns": neighbours(a.netns),
            "victim netns": neighbours(v.netns),
            "root": neighbours(None),
        }
    finally:
        remove_probe(a.netns)
    assert sent == len(garps) * REPEAT
    assert counted["in-arp"] >= sent, counted  # the claims reached the host ...
    assert dropped >= sent, dropped  # ... and went no further than tap0's ingress
    # The one true entry naming a guest's MAC: its own address, on its own slot's tap.
    lies = {
        name: [
            n
            for n in entries
            if n[2] in (FORGED_MAC, GUEST_MAC) and n != ("tap0", GUEST_IP, GUEST_MAC)
        ]
        for name, entries in tables.items()
    }
    assert lies == {name: [] for name in tables}, lies
    # Only the slot's own tap entries name the guest; the gateway stays the tap's.
    assert all(n[1] == GUEST_IP for n in tables["attacker netns"] if n[0] == "tap0"), tables
    # Both guests still answer through their slots (a poisoned path would cut them off).
    assert (await asyncio.to_thread(attacker.sh, "echo up")).strip() == "up"
    assert (await asyncio.to_thread(victim.sh, "echo up")).strip() == "up"
    print(
        f"\n{sent} gratuitous ARP frames; host side: {counted}, dropped at tap0: {dropped}; "
        f"the slot's neighbours: {tables['attacker netns']}"
    )
