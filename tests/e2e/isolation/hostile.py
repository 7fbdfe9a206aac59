"""What a hostile guest runs: uploaded into a sandbox and run as root by its own python3
(standard library only). `python3 hostile.py '<json plan or list of plans>'` prints one JSON
result (a list for a list: one interpreter start under TCG costs seconds).

Plans: `connect` (TCP to each target, IPv4 or IPv6 with a `%eth0` scope), `ping` (ICMP echo on a
raw socket), `arp` (who-has on eth0 through a packet socket), `frames` (hand-made Ethernet
frames: IPv4/UDP from any source address and MAC, gratuitous ARP claiming any address, IPv6/UDP).
Every probe waits `wait_s` at most: an unanswered probe is an answer.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

IFACE = "eth0"
ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
BROADCAST = b"\xff" * 6


def connect(target: list[Any], wait_s: float) -> str:
    host, port = str(target[0]), int(target[1])
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(info[0], socket.SOCK_STREAM) as conn:
            conn.settimeout(wait_s)
            conn.connect(info[4])
            try:
                return "open:" + conn.recv(64).decode(errors="replace")
            except TimeoutError:
                return "open:"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"error:{exc.errno}"


def ping(address: str, wait_s: float) -> str:
    v6 = ":" in address
    family, proto = (socket.AF_INET6, 58) if v6 else (socket.AF_INET, socket.IPPROTO_ICMP)
    kind = 128 if v6 else 8
    with socket.socket(family, socket.SOCK_RAW, proto) as sock:
        sock.settimeout(wait_s)
        ident = 0x4145
        header = struct.pack("!BBHHH", kind, 0, 0, ident, 1) + b"aenv-isolation"
        if not v6:
            header = header[:2] + struct.pack("!H", _checksum(header)) + header[4:]
        try:
            sock.sendto(header, socket.getaddrinfo(address, 0, family)[0][4])
        except OSError as exc:
            return f"error:{exc.errno}"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                reply, _ = sock.recvfrom(2048)
            except TimeoutError:
                break
            icmp = reply if v6 else reply[(reply[0] & 0x0F) * 4 :]
            if icmp[0] == (129 if v6 else 0) and struct.unpack("!H", icmp[4:6])[0] == ident:
                return "reply"
    return "timeout"


def arp(targets: list[str], wait_s: float) -> dict[str, str]:
    """Who-has each target, from the guest's own addresses; what answered."""
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP)) as sock:
        sock.bind((IFACE, 0))
        mac = sock.getsockname()[4]
        own = _own_ipv4()
        for target in targets:
            sock.send(_arp_frame(1, mac, own, BROADCAST, target))
        answered = {target: "timeout" for target in targets}
        sock.settimeout(0.1)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                frame = sock.recv(2048)
            except TimeoutError:
                continue
            op, sender = struct.unpack("!H", frame[20:22])[0], socket.inet_ntoa(frame[28:32])
            if op == 2 and sender in answered:
                answered[sender] = "reply:" + frame[22:28].hex(":")
    return answered


def frames(specs: list[dict[str, Any]], repeat: int) -> int:
    """Send hand-made frames out of eth0; returns how many were sent."""
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as sock:
        sock.bind((IFACE, 0))
        own_mac = sock.getsockname()[4]
        built = [_frame(spec, own_mac) for spec in specs]
        sent = 0
        for _ in range(repeat):
            for frame in built:
                sock.send(frame)
                sent += 1
    return sent


def _frame(spec: dict[str, Any], own_mac: bytes) -> bytes:
    src_mac = bytes.fromhex(spec["src_mac"].replace(":", "")) if spec.get("src_mac") else own_mac
    dst_mac = bytes.fromhex(spec.get("dst_mac", "ff:ff:ff:ff:ff:ff").replace(":", ""))
    kind = spec["kind"]
    if kind == "garp":  # gratuitous ARP: "address X is at src_mac", to everyone
        return _arp_frame(2, src_mac, spec["claim"], BROADCAST, spec["claim"], eth_src=src_mac)
    payload = str(spec.get("tag", "aenv")).encode()
    if kind == "udp4":
        udp = struct.pack("!HHHH", 40000, int(spec["port"]), 8 + len(payload), 0) + payload
        ip = struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(udp),
            1,
            0,
            64,
            17,
            0,
            socket.inet_aton(spec["src"]),
            socket.inet_aton(spec["dst"]),
        )
        ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
        return dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + ip + udp
    if kind == "udp6":
        udp = struct.pack("!HHHH", 40000, int(spec["port"]), 8 + len(payload), 0) + payload
        ip6 = struct.pack(
            "!IHBB16s16s",
            6 << 28,
            len(udp),
            17,
            64,
            socket.inet_pton(socket.AF_INET6, spec["src"]),
            socket.inet_pton(socket.AF_INET6, spec["dst"]),
        )
        return dst_mac + src_mac + struct.pack("!H", ETH_P_IPV6) + ip6 + udp
    raise ValueError(f"unknown frame kind {kind!r}")


def _arp_frame(
    op: int,
    sender_mac: bytes,
    sender_ip: str,
    target_mac: bytes,
    target_ip: str,
    eth_src: bytes | None = None,
) -> bytes:
    body = struct.pack(
        "!HHBBH6s4s6s4s",
        1,
        ETH_P_IP,
        6,
        4,
        op,
        sender_mac,
        socket.inet_aton(sender_ip),
        target_mac if op == 2 else b"\0" * 6,
        socket.inet_aton(target_ip),
    )
    return BROADCAST + (eth_src or sender_mac) + struct.pack("!H", ETH_P_ARP) + body


def _own_ipv4() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        return str(probe.getsockname()[0])


def _checksum(data: bytes) -> int:
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return int(~total & 0xFFFF)


def run(plan: dict[str, Any]) -> object:
    wait_s = float(plan.get("wait_s", 1.5))
    op = plan["op"]
    if op in ("connect", "ping"):
        probe = connect if op == "connect" else ping
        targets = plan["targets"]
        with ThreadPoolExecutor(max(1, len(targets))) as pool:
            results = list(pool.map(lambda t: probe(t, wait_s), targets))
        return [[str(t), r] for t, r in zip(targets, results, strict=True)]
    if op == "arp":
        return arp(plan["targets"], wait_s)
    if op == "frames":
        return frames(plan["frames"], int(plan.get("repeat", 1)))
    raise ValueError(f"unknown plan {op!r}")


if __name__ == "__main__":
    plans = json.loads(sys.argv[1])
    print(json.dumps([run(p) for p in plans] if isinstance(plans, list) else run(plans)))
