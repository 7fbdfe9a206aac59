"""The SDK's default configuration, `E2B_API_KEY` + `E2B_DOMAIN` alone.

A platform with an HTTPS edge for a domain (its own CA), and a client network namespace whose
resolver is Debian's dnsmasq answering the wildcard domain with the gateway's address. The
unmodified SDK program runs in that namespace: it finds the API and every sandbox host by DNS,
trusts the edge by SSL_CERT_FILE, creates a sandbox, runs commands, fetches an app port through
`get_host`, and wakes the paused sandbox with a plain HTTPS request to it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.edge import PublicEdge
from aenv_cli.platform import Platform
from aenv_testing.subnets import free_subnet

from ..conftest import running_platform, shared_cache_dir

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

PROGRAM = Path(__file__).parent / "programs" / "e2b_domain_program.py"
DOMAIN = "sbx.aenv-e2e.test"


@dataclass(frozen=True)
class ClientNetns:
    name: str
    gateway_address: str  # the host's end of the link: where DNS points the domain


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def client_netns() -> Iterator[ClientNetns]:
    """A namespace linked to the host by a veth pair, resolving names with its own dnsmasq
    (`ip netns exec` puts /etc/netns/<name>/resolv.conf over /etc/resolv.conf)."""
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"aedns-{tag}", f"aedh{tag}", f"aedn{tag}"
    link = ipaddress.IPv4Network(free_subnet(30))
    gateway, resolver = str(link.network_address + 1), str(link.network_address + 2)
    etc = Path("/etc/netns") / name
    dnsmasq: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", name)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", name)
        _ip("addr", "add", f"{gateway}/{link.prefixlen}", "dev", host_if)
        _ip("link", "set", host_if, "up")
        for args in (["addr", "add", f"{resolver}/{link.prefixlen}", "dev", ns_if],
                     ["link", "set", ns_if, "up"], ["link", "set", "lo", "up"]):
            _ip("-n", name, *args)
        etc.mkdir(parents=True)
        (etc / "resolv.conf").write_text(f"nameserver {resolver}\n")
        dnsmasq = subprocess.Popen(
            ["ip", "netns", "exec", name, "dnsmasq", "--keep-in-foreground",
             "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll", "--bind-interfaces",
             f"--listen-address={resolver}", f"--address=/{DOMAIN}/{gateway}", "--pid-file=",
             "--log-facility=-"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        yield ClientNetns(name, gateway)
    finally:
        if dnsmasq is not None:
            dnsmasq.terminate()
            dnsmasq.wait(10)
        shutil.rmtree(etc, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # takes the veth pair


@pytest_asyncio.fixture
async def domain_platform(
    tmp_path: Path, client_netns: ClientNetns
) -> AsyncIterator[Platform]:
    prefix = "aed" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "x"
    env = dict(os.environ) | {
        "AENV_NODEAGENT_CACHE_DIR": str(shared_cache_dir()),
        "AENV_NODEAGENT_NET_PREFIX": prefix,
        "AENV_NODEAGENT_NET_POOL_CIDR": free_subnet(24),
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0",
    }
    edge = PublicEdge(DOMAIN, f"{client_netns.gateway_address}:443")
    async with running_platform(tmp_path / "home", env, prefix, edge) as plat:
        yield plat


async def _resolves(netns: str, name: str) -> str:
    """The address `name` has inside the namespace (dnsmasq may still be starting)."""
    script = f"import socket; print(socket.gethostbyname({name!r}))"
    for _ in range(50):
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", netns, sys.executable, "-c", script,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        if proc.returncode == 0:
            return out.decode().strip()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} never resolved in {netns}")


async def test_the_sdk_with_only_e2b_domain_set(
    domain_platform: Platform, client_netns: ClientNetns
) -> None:
    gateway = client_netns.gateway_address
    assert await _resolves(client_netns.name, f"anything.{DOMAIN}") == gateway
    env = domain_platform.e2b_env()
    assert set(env) == {"E2B_API_KEY", "E2B_DOMAIN", "SSL_CERT_FILE"}
    # Nothing else of the test's environment: what a user's shell would have.
    env |= {"PATH": os.environ["PATH"], "HOME": str(domain_platform.home)}
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", client_netns.name, sys.executable, str(PROGRAM), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    print(seen)
    sandbox_id = seen["sandbox_id"]
    assert seen["api_address"] == gateway and seen["sandbox_address"] == gateway
    assert seen["echo"] == "hello from the guest\n"
    assert seen["host"] == f"8000-{sandbox_id}.{DOMAIN}"
    assert seen["app"] == "served by the guest app\n"
    assert seen["paused_state"] == "paused"
    assert seen["after_resume"] == [200, "served by the guest app\n"]
    assert seen["resumed_state"] == "running"
