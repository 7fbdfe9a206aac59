"""The test internet: named hosts on addresses no machine really uses, inside a netns of the
test's own, so egress-by-name is tested with real DNS, HTTP, TLS and SOCKS5 and nothing leaves
the machine.

    with running_internet() as net:
        net.addresses[ALLOWED]      # ["198.18.<n>.10"]: what dnsmasq answers for the name
        net.node_env()              # the node agent's egress upstream DNS and extra CA
        net.requests()              # every request the web servers saw, headers included

Layout (instance n of 16, so parallel runs never share a prefix): a netns `aeinet-<tag>` linked
to the root netns by a veth on a private /30; its hosts live on its loopback in 198.18.<n>.0/24
(RFC 2544 benchmarking space) and 203.0.113.<16n>/28 (TEST-NET-3), and the root netns routes just
those two prefixes into the veth (claimed by `ip route add`, which fails if another run holds
them). The netns has no other route out. Inside:

- dnsmasq on 198.18.<n>.53: allowed/other/denied hosts, `*.wild`, a name with two addresses (one
  in each prefix), the SOCKS5 proxy's name; anything else NXDOMAIN, nothing forwarded. A second
  one on 198.18.<n>.54 (`alt_dns`) answers the allowed name with the other host's address, so
  a sandbox's own `dnsServers` are seen to be used.
- `servers.py`: HTTP :80 and HTTPS :443 on every host address (certificates of the test's CA,
  by SNI), answering and recording every request.
- Debian's microsocks on 198.18.<n>.80:1080 (user/password) and stunnel4 in front of it on :1443.

Everything is torn down when the block ends, also when it fails half-way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query

from aenv_nodeagent.egress.certs import EgressCA
from aenv_testing.subnets import free_subnet

DOMAIN = "aenv-test.example"
ALLOWED = f"allowed.{DOMAIN}"
OTHER = f"other.{DOMAIN}"
DENIED = f"denied.{DOMAIN}"
WILD = f"wild.{DOMAIN}"  # dnsmasq answers it and every name below it
TWO = f"two.{DOMAIN}"  # two addresses, one in each prefix
SOCKS = f"socks.{DOMAIN}"
SOCKS_USER = "aenv-tester"
SOCKS_PORT, SOCKS_TLS_PORT = 1080, 1443
SERVERS = Path(__file__).with_name("servers.py")
INSTANCES = 16
READY_S = 30.0


@dataclass
class Internet:
    netns: str
    dns: str
    alt_dns: str
    ca_file: Path  # world-readable: the egress process runs unprivileged
    ca: EgressCA
    addresses: dict[str, list[str]]  # name -> what dnsmasq answers
    unnamed: str  # a host with servers and no name (the raw-IP cases)
    socks_address: str  # microsocks, host:port
    socks_tls_address: str  # stunnel in front of it
    socks_password: str = field(repr=False)
    workdir: Path = Path()
    root_if: str = ""  # the root netns's end of the link
    prefixes: tuple[str, ...] = ()  # what the root netns routes into this internet

    @property
    def ca_pem(self) -> str:
        return self.ca.cert_pem.decode()

    def node_env(self) -> dict[str, str]:
        """Node agent settings that make this internet the node's upstream, and the only
        place the node forwards what guests send out themselves (an IP-only policy's
        traffic, UDP to an allowed name's addresses): nothing of it leaves the machine."""
        return {
            "AENV_NODEAGENT_EGRESS_DNS_UPSTREAMS": json.dumps([self.dns]),
            "AENV_NODEAGENT_EGRESS_UPSTREAM_CA_FILE": str(self.ca_file),
            "AENV_NODEAGENT_EGRESS_FORWARD_DESTINATIONS": json.dumps(list(self.prefixes)),
        }

    def requests(self) -> list[dict[str, Any]]:
        """Every request the web servers answered so far, oldest first."""
        log = self.workdir / "requests.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line]

    def log(self, server: str) -> str:
        """What one server process (`microsocks`, `stunnel`, `dnsmasq`, `dnsmasq-alt`,
        `servers`) logged so far: the proxy's lines name each connection it made."""
        path = self.workdir / f"{server}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def headers_of(request: dict[str, Any], name: str) -> list[str]:
    """The values of header `name` (any case) in one recorded request."""
    return [v for k, v in request["headers"] if k.lower() == name.lower()]


@contextlib.contextmanager
def running_internet() -> Iterator[Internet]:
    with contextlib.ExitStack() as stack:
        tag = secrets.token_hex(3)
        netns, root_if, ns_if = f"aeinet-{tag}", f"aei{tag}h", f"aei{tag}n"
        link = ipaddress.IPv4Network(free_subnet(30))
        root_end, ns_end = str(link.network_address + 1), str(link.network_address + 2)
        workdir = Path(tempfile.mkdtemp(prefix="aeinet-"))
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        workdir.chmod(0o755)
        _ip("netns", "add", netns)
        stack.callback(_quiet, "ip", "netns", "del", netns)
        _ip("link", "add", root_if, "type", "veth", "peer", "name", ns_if, "netns", netns)
        stack.callback(_quiet, "ip", "link", "del", root_if)  # takes its routes along
        _ip("addr", "add", f"{root_end}/30", "dev", root_if)
        _ip("link", "set", root_if, "up")
        for args in (["addr", "add", f"{ns_end}/30", "dev", ns_if], ["link", "set", ns_if, "up"],
                     ["link", "set", "lo", "up"], ["route", "add", "default", "via", root_end]):
            _ip("-n", netns, *args)
        n = _claim_prefixes(ns_end)
        bench, doc = f"198.18.{n}", f"203.0.113.{16 * n}"
        hosts = {ALLOWED: [f"{bench}.10"], OTHER: [f"{bench}.11"], DENIED: [f"{bench}.12"],
                 WILD: [f"{bench}.13"], TWO: [f"{bench}.14", _plus(doc, 14)],
                 SOCKS: [f"{bench}.80"]}
        unnamed, dns, alt_dns = _plus(doc, 5), f"{bench}.53", f"{bench}.54"
        for address in {a for found in hosts.values() for a in found} | {unnamed, dns, alt_dns}:
            _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")
        etc = Path("/etc/netns") / netns  # `ip netns exec` binds it over /etc (microsocks' DNS)
        etc.mkdir(parents=True)
        stack.callback(shutil.rmtree, etc, ignore_errors=True)
        (etc / "resolv.conf").write_text(f"nameserver {dns}\n")
        ca = EgressCA.generate()
        ca_file = workdir / "ca.pem"
        ca_file.write_bytes(ca.cert_pem)
        ca_file.chmod(0o644)
        password = secrets.token_urlsafe(12)
        net = Internet(
            netns, dns, alt_dns, ca_file, ca, hosts, unnamed, f"{bench}.80:{SOCKS_PORT}",
            f"{bench}.80:{SOCKS_TLS_PORT}", password, workdir, root_if,
            (f"{bench}.0/24", f"{doc}/28"))
        _start_dnsmasq(stack, net)
        _start_servers(stack, net)
        _start_socks(stack, net)
        yield net


def _claim_prefixes(via: str) -> int:
    """The first instance whose two prefixes this run could route (an `ip route add` of a
    prefix another run holds fails)."""
    for n in range(INSTANCES):
        if _quiet("ip", "route", "add", f"198.18.{n}.0/24", "via", via) != 0:
            continue
        if _quiet("ip", "route", "add", f"203.0.113.{16 * n}/28", "via", via) == 0:
            return n
        _quiet("ip", "route", "del", f"198.18.{n}.0/24", "via", via)
    raise RuntimeError(f"all {INSTANCES} test internets are in use on this host")


def _start_dnsmasq(stack: contextlib.ExitStack, net: Internet) -> None:
    records = [f"--host-record={name},{address}"
               for name, found in net.addresses.items() if name != WILD for address in found]
    _dnsmasq(stack, net, "dnsmasq", net.dns,
             [*records, f"--address=/{WILD}/{net.addresses[WILD][0]}"])
    _dnsmasq(stack, net, "dnsmasq-alt", net.alt_dns,
             [f"--host-record={ALLOWED},{net.addresses[OTHER][0]}"])
    _wait(lambda: _resolves(net.dns, ALLOWED) and _resolves(net.alt_dns, ALLOWED), "dnsmasq")


def _dnsmasq(stack: contextlib.ExitStack, net: Internet, name: str, listen: str,
             records: list[str]) -> None:
    _spawn(stack, net, name, [
        "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
        "--no-poll", "--bind-interfaces", f"--listen-address={listen}", "--pid-file=",
        "--log-facility=-", "--log-queries", "--local-ttl=300", *records])


def _start_servers(stack: contextlib.ExitStack, net: Internet) -> None:
    key = net.workdir / "ca-key.pem"
    key.write_bytes(net.ca.key_pem())
    key.chmod(0o600)
    config = net.workdir / "servers.json"
    addresses = sorted({a for name, found in net.addresses.items() if name != SOCKS
                        for a in found} | {net.unnamed})
    config.write_text(json.dumps({
        "addresses": addresses, "names": [ALLOWED], "ca_cert": str(net.ca_file),
        "ca_key": str(key), "log": str(net.workdir / "requests.jsonl")}))
    _spawn(stack, net, "servers", [sys.executable, str(SERVERS), str(config)])
    _wait(lambda: _listens(addresses[0], 443), "web servers")


def _start_socks(stack: contextlib.ExitStack, net: Internet) -> None:
    host = net.addresses[SOCKS][0]
    _spawn(stack, net, "microsocks", [
        "microsocks", "-i", host, "-p", str(SOCKS_PORT), "-u", SOCKS_USER,
        "-P", net.socks_password])
    leaf = net.ca.mint(SOCKS)
    pem = net.workdir / "socks-tls.pem"
    pem.write_bytes(leaf.cert_pem + leaf.key_pem)
    pem.chmod(0o600)
    conf = net.workdir / "stunnel.conf"
    conf.write_text("\n".join([
        "foreground = yes", "pid =", f"output = {net.workdir / 'stunnel.log'}", "debug = 5",
        "[socks-tls]", f"accept = {host}:{SOCKS_TLS_PORT}", f"connect = {host}:{SOCKS_PORT}",
        f"cert = {pem}", "sslVersionMin = TLSv1.2", ""]))
    _spawn(stack, net, "stunnel", ["stunnel4", str(conf)])
    _wait(lambda: _listens(host, SOCKS_PORT) and _listens(host, SOCKS_TLS_PORT), "socks")


def _spawn(stack: contextlib.ExitStack, net: Internet, name: str, argv: list[str]) -> None:
    log = (net.workdir / f"{name}.log").open("ab")
    stack.callback(log.close)
    # stdbuf: microsocks logs each connection with stdio, line by line only to a terminal.
    proc = subprocess.Popen(["ip", "netns", "exec", net.netns, "stdbuf", "-oL", "-eL", *argv],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    stack.callback(_stop, proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _wait(ready: Any, what: str) -> None:
    deadline = time.monotonic() + READY_S
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"test internet: {what} not ready within {READY_S} s")
        time.sleep(0.05)


def _resolves(server: str, name: str) -> bool:
    try:
        answer = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=0.5)
    except (OSError, dns.exception.Timeout):
        return False
    return bool(answer.answer)


def _listens(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def _plus(base: str, offset: int) -> str:
    return str(ipaddress.IPv4Address(base) + offset)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _quiet(*argv: str) -> int:
    return subprocess.run(list(argv), capture_output=True, check=False).returncode

