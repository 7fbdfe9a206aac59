"""Run inside a guest (python3 of the base image, standard library only) by the egress tests.

    python3 guest_probe.py dns <server> <name> [udp|tcp]   -> {"rcode": int | null, "addresses"}
    python3 guest_probe.py capture <seconds> <file>        -> every frame of eth0, raw, to <file>,
                                                              until <file>.stop exists
    python3 guest_probe.py find <hex of the reversed value> -> {"found": [where, ...]}

`dns` asks one server directly (what a guest trying to get around the platform's resolver
does); rcode null means no answer. `capture` is what root in the guest can see of its own
traffic: an AF_PACKET socket on eth0, both directions. `find` looks for a value in every
process's environment and command line and in every file outside /proc, /sys, /dev and /usr
(the read-only system); it takes the value encoded so that its own command line, and the
request that started it, do not hold it.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import sys
import time


def _query(name: str) -> tuple[int, bytes]:
    ident = random.randrange(1 << 16)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    return ident, struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + qname + b"\0\1\0\1"


def _answers(message: bytes, ident: int) -> dict[str, object]:
    got_id, flags, qd, an, _, _ = struct.unpack("!HHHHHH", message[:12])
    if got_id != ident:
        return {"rcode": None, "addresses": []}
    offset = 12
    for _ in range(qd):
        while message[offset]:
            offset += message[offset] + 1
        offset += 5
    addresses = []
    for _ in range(an):
        offset += 2 if message[offset] & 0xC0 == 0xC0 else len(message[offset:].split(b"\0")[0]) + 1
        rtype, _, _, size = struct.unpack("!HHIH", message[offset:offset + 10])
        offset += 10
        if rtype == 1 and size == 4:
            addresses.append(socket.inet_ntoa(message[offset:offset + 4]))
        offset += size
    return {"rcode": flags & 0xF, "addresses": addresses}


def dns(server: str, name: str, transport: str = "udp") -> dict[str, object]:
    ident, query = _query(name)
    try:
        if transport == "tcp":
            with socket.create_connection((server, 53), timeout=5) as conn:
                conn.sendall(struct.pack("!H", len(query)) + query)
                size = struct.unpack("!H", conn.recv(2))[0]
                message = b""
                while len(message) < size:
                    message += conn.recv(size - len(message))
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(5)
                sock.sendto(query, (server, 53))
                message = sock.recv(4096)
    except (OSError, struct.error):
        return {"rcode": None, "addresses": []}
    return _answers(message, ident)


def capture(seconds: float, path: str) -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.bind(("eth0", 0))
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    with open(path, "wb") as out:
        while time.monotonic() < deadline and not os.path.exists(path + ".stop"):
            try:
                out.write(sock.recv(65536))
            except TimeoutError:
                continue
            out.flush()


def find(encoded: str) -> dict[str, list[str]]:
    value = bytes.fromhex(encoded)[::-1]
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for part in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as held:
                    if value in held.read():
                        found.append(f"/proc/{pid}/{part}")
            except OSError:
                continue
    for top, dirs, files in os.walk("/"):
        if top == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev", "usr")]
        for name in files:
            path = os.path.join(top, name)
            try:
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as held:
                        if value in held.read():
                            found.append(path)
            except OSError:
                continue
    return {"found": found}


if __name__ == "__main__":
    if sys.argv[1] == "dns":
        print(json.dumps(dns(*sys.argv[2:])))
    elif sys.argv[1] == "find":
        print(json.dumps(find(sys.argv[2])))
    else:
        capture(float(sys.argv[2]), sys.argv[3])
