"""The host's side of a sandbox, as its node agent left it: its QEMU, netns and addresses, and
test-only instruments in its netns — listeners, and a probe table that counts what the guest
sent (at tap0's ingress) and what of it left the netns (at veth0), dropping the test's own
crafted traffic so none of it ever reaches the root netns."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.network.namespaces import enter_netns, netns_path, run_in_fresh_thread
from aenv_nodeagent.network.slots import (
    GATEWAY_IP,
    GUEST_IP,
    NS_VETH_NAME,
    TAP_NAME,
    host_veth_name,
    index_from_netns,
)

# Where the guest sends the traffic the probe table drops: TEST-NET-2, never routed anywhere.
CRAFTED_NET = "198.51.100.0/24"
CRAFTED_DST = "198.51.100.7"
PROBE_TABLE = "aenvprobe"
# Set on every frame at tap0's ingress: what leaves with it came from the guest. ``iifname`` alone
# cannot say so at postrouting, where the kernel gives the netns's own packets out of tap0 (IPv6
# router solicitations and MLD reports when a VM brings the link up) tap0 as their input device.
FROM_GUEST = "0xa3e7"


@dataclass(frozen=True)
class HostSide:
    """What the host holds of one running sandbox."""

    sandbox_id: str
    directory: Path
    qemu_pid: int
    netns: str
    ns_ip: str  # the netns end of its veth: where the host reaches the guest's ports
    host_ip: str  # the root netns end
    host_veth: str

    def cgroup_dir(self, controller: str) -> Path:
        """QEMU's cgroup of `controller` (v1 hierarchy, else the v2 one)."""
        for line in Path(f"/proc/{self.qemu_pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return Path("/sys/fs/cgroup", controller) / path.lstrip("/")
        for line in Path(f"/proc/{self.qemu_pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
        raise AssertionError(f"QEMU {self.qemu_pid} has no {controller} cgroup")


def host_side(home: Path, prefix: str, sandbox_id: str) -> HostSide:
    """Found as an operator would: the QEMU holding the sandbox's directory open, the netns it
    runs in, that netns's veth address."""
    directory = home / "nodeagent" / "sandboxes" / sandbox_id
    pid = _qemu_holding(directory)
    netns = _netns_of(pid, prefix)
    index = index_from_netns(prefix, netns)
    assert index is not None
    ns_ip = _ns_address(netns)
    host_ip = str(ipaddress.IPv4Address(ns_ip) - 1)
    return HostSide(
        sandbox_id, directory, pid, netns, ns_ip, host_ip, host_veth_name(prefix, index)
    )


def _qemu_holding(directory: Path) -> int:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"qemu-system" not in (proc / "cmdline").read_bytes():
                continue
            links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        if any(link.startswith(f"{directory}/") for link in links):
            return int(proc.name)
    raise AssertionError(f"no QEMU holds {directory}")


def _netns_of(pid: int, prefix: str) -> str:
    inode = os.stat(f"/proc/{pid}/ns/net").st_ino
    for name in os.listdir("/run/netns"):
        if name.startswith(prefix + "-") and os.stat(netns_path(name)).st_ino == inode:
            return name
    raise AssertionError(f"QEMU {pid} runs in no netns of {prefix}")


def _ns_address(netns: str) -> str:
    out = in_netns_argv(netns, ["ip", "-j", "-4", "addr", "show", "dev", NS_VETH_NAME])
    return str(json.loads(out)[0]["addr_info"][0]["local"])


def in_netns_argv(netns: str | None, argv: list[str], stdin: str | None = None) -> str:
    """Run a command in `netns` (None: the root netns); its stdout."""
    prefix = ["nsenter", f"--net={netns_path(netns)}", "--"] if netns else []
    done = subprocess.run(
        [*prefix, *argv], input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def root_addresses() -> list[str]:
    """The root netns's own addresses, loopback and IPv6 link-local left out (a guest could
    only try them through its gateway: they are covered by their own probes)."""
    found = []
    for link in json.loads(in_netns_argv(None, ["ip", "-j", "addr"])):
        for info in link.get("addr_info", []):
            address = ipaddress.ip_address(info["local"])
            if not (address.is_loopback or address.is_link_local):
                found.append(str(address))
    return found


def tap_link_local(netns: str) -> str:
    out = in_netns_argv(netns, ["ip", "-j", "-6", "addr", "show", "dev", TAP_NAME])
    addresses = [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])]
    return str(addresses[0]) if addresses else ""


def neighbours(netns: str | None) -> list[tuple[str, str, str]]:
    """(device, address, MAC) of every neighbour entry with a MAC."""
    out = json.loads(in_netns_argv(netns, ["ip", "-j", "neigh", "show"]))
    return [(n["dev"], n["dst"], n["lladdr"]) for n in out if "lladdr" in n]


# -- the probe table ----------------------------------------------------------------------------


def install_probe(netns: str, ports: list[int]) -> None:
    """Counters in the sandbox's netns: per UDP port, frames that reached tap0 (before any of the
    node's rules) and packets that left through veth0 (after them); any other guest-originated
    traffic leaving; ARP and IPv6 reaching tap0. Crafted traffic (to CRAFTED_NET) is dropped
    after counting, so it never leaves the netns."""
    arrived = [f'    udp dport {p} counter comment "in-{p}"' for p in ports]
    from_guest = f"meta mark {FROM_GUEST}"
    left = [f'    {from_guest} udp dport {p} counter comment "out-{p}"' for p in ports]
    script = "\n".join(
        [
            f"table netdev {PROBE_TABLE} {{",
            f'  chain tap {{ type filter hook ingress device "{TAP_NAME}" priority -1000;',
            f"    meta mark set {FROM_GUEST}",
            *arrived,
            '    ether type arp counter comment "in-arp"',
            '    ether type ip6 counter comment "in-ip6"',
            '    tcp flags syn counter comment "in-syn"',
            "  }",
            "}",
            f"table inet {PROBE_TABLE} {{",
            "  chain post { type filter hook postrouting priority 300;",
            *left,
            f"    {from_guest} ip daddr {CRAFTED_NET} drop",
            f'    {from_guest} oifname "{NS_VETH_NAME}" ct direction original '
            'counter drop comment "guest-out"',
            f'    {from_guest} meta nfproto ipv6 counter drop comment "guest-out6"',
            "  }",
            "}",
        ]
    )
    remove_probe(netns)
    in_netns_argv(netns, ["nft", "-f", "-"], stdin=script + "\n")


def remove_probe(netns: str) -> None:
    for family in ("netdev", "inet"):
        subprocess.run(
            [
                "nsenter",
                f"--net={netns_path(netns)}",
                "--",
                "nft",
                "delete",
                "table",
                family,
                PROBE_TABLE,
            ],
            capture_output=True,
            check=False,
            timeout=30,
        )


def counters(netns: str | None, family: str, table: str) -> dict[str, int]:
    """Packets counted by each commented rule of a table."""
    out = json.loads(in_netns_argv(netns, ["nft", "-j", "list", "table", family, table]))
    found: dict[str, int] = {}
    for item in out["nftables"]:
        rule = item.get("rule")
        if rule and rule.get("comment"):
            packets = [e["counter"]["packets"] for e in rule["expr"] if "counter" in e]
            found[rule["comment"]] = int(packets[0]) if packets else 0
    return found


def probe_counters(netns: str) -> dict[str, int]:
    return counters(netns, "netdev", PROBE_TABLE) | counters(netns, "inet", PROBE_TABLE)


# -- listeners ----------------------------------------------------------------------------------

Stop = Callable[[], Awaitable[None]]


async def listen_tcp(netns: str | None, host: str, payload: bytes) -> tuple[int, Stop]:
    """A TCP server on (host, free port) in `netns` (None: root) greeting with `payload`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    def bind() -> socket.socket:
        if netns:
            enter_netns(netns)
        sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(
            (host, 0, 0, socket.if_nametoindex(TAP_NAME)) if host.startswith("fe80") else (host, 0)
        )
        sock.listen()
        return sock

    sock = await run_in_fresh_thread(bind, name="isolation-listen")

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, sock=sock)

    async def stop() -> None:
        server.close()
        await server.wait_closed()

    return int(sock.getsockname()[1]), stop


async def udp_inbox(netns: str | None, host: str) -> tuple[int, Callable[[], list[bytes]]]:
    """A UDP socket on (host, free port) in `netns`; `drain()` returns what it received."""

    def bind() -> socket.socket:
        if netns:
            enter_netns(netns)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((host, 0))
        sock.setblocking(False)
        return sock

    sock = await run_in_fresh_thread(bind, name="isolation-udp")

    def drain() -> list[bytes]:
        got = []
        while True:
            try:
                got.append(sock.recv(2048))
            except BlockingIOError:
                sock.close()
                return got

    return int(sock.getsockname()[1]), drain


__all__ = ["GATEWAY_IP", "GUEST_IP", "HostSide", "host_side"]
