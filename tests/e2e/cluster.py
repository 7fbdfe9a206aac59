"""A cluster on one machine: three "hosts", each a network namespace of its own with its own
address on a bridge, running a node agent; etcd, two scheduler replicas, snapstore and the
gateway in the root namespace. The gateway and schedulers reach the node agents only over the
hosts' addresses; the node agents reach etcd and snapstore over the bridge's.

    async with running_cluster(tmp_path) as cluster:
        cluster.hosts[0].node_id, cluster.grpc_target, cluster.api_key ...
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aenv_cli.children import ChildProcess
from aenv_cli.client import GatewayClient
from aenv_cli.files import e2b_env_lines, read_api_key
from aenv_cli.ports import PlatformPorts, address
from aenv_cli.readiness import GrpcHealthProbe, HttpHealthProbe, Probe
from aenv_cli.services import ETCD_BINARY, service_environment
from aenv_common.errors import NotFound
from aenv_testing.platform_ports import free_platform_ports
from aenv_testing.ports import free_port
from aenv_testing.subnets import free_subnet

from ..conftest import FORWARD_DESTINATIONS, netns_names, qemu_pids_under, shared_cache_dir

# Inside its own netns every host uses the project's default ports.
NODEAGENT_PORT = 50052
PROXY_PORT = 50080
METRICS_PORT = 9102
START_TIMEOUT_S = 300.0
# Above the single-node platform's default range (1_000_000_000 + 65536).
VMM_UID_FIRST = 1_100_000_000
VMM_UID_COUNT = 4096


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True)


def _in_host_namespaces(netns: str) -> list[str]:
    """The command prefix that runs a program on a host: in its netns, in a mount namespace of
    its own where /sys is the netns's (its /sys/class/net, as `ip netns exec` gives) with this
    machine's cgroup hierarchies mounted again (mounting one again attaches the existing one), so
    its VMs are confined as on a real host. Unlike `ip netns exec`, which makes every mount a
    slave, the copies keep their propagation: the netns mounts a node agent makes under the
    shared /run/netns are seen by every namespace, also after the agent died (its successor
    finds its VMs' slots and re-adopts them). /sys is a slave first: nothing mounted on it
    reaches the machine's."""
    lines = ["mount --make-rslave /sys", "mount -t sysfs sysfs /sys"]
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, target, fstype, options = line.split()[:4]
        if target == "/sys/fs/cgroup" and fstype == "tmpfs":
            lines.append(f"mount -t tmpfs -o {options} {source} {target}")
        elif target.startswith("/sys/fs/cgroup/") and fstype in ("cgroup", "cgroup2"):
            lines += [f"mkdir -p {target}", f"mount -t {fstype} -o {options} {source} {target}"]
    script = "\n".join([*lines, 'exec "$@"'])
    return [
        "nsenter",
        f"--net=/run/netns/{netns}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "unchanged",
        "--",
        "sh",
        "-ec",
        script,
        "sh",
    ]


@dataclass
class Host:
    node_id: str
    netns: str  # the host's own network namespace
    veth: str  # its link to the bridge, root side
    ip: str
    home: Path
    slot_prefix: str  # its sandboxes' netns names: <slot_prefix>-<n>
    env: dict[str, str]
    child: ChildProcess | None = None

    @property
    def nodeagent_address(self) -> str:
        return f"{self.ip}:{NODEAGENT_PORT}"

    def argv(self, *args: str) -> list[str]:
        return [*_in_host_namespaces(self.netns), sys.executable, "-m", "aenv_nodeagent", *args]

    async def start(self) -> None:
        self.child = await ChildProcess.spawn(
            self.node_id, self.argv(), self.env, self.home / "nodeagent.log"
        )
        await _until_ready(self.child, GrpcHealthProbe(self.nodeagent_address))

    async def stop(self) -> None:
        """Stops the agent (its VMs with it); one that had died gets its cleanup run."""
        if self.child is None:
            return
        child, self.child = self.child, None
        was_running = child.returncode is None
        if await child.stop(60) != 0 or not was_running:
            cleanup = await ChildProcess.spawn(
                f"{self.node_id}-cleanup",
                self.argv("cleanup"),
                self.env,
                self.home / "cleanup.log",
            )
            await asyncio.wait_for(cleanup.wait(), 120)


@dataclass
class Cluster:
    home: Path
    bridge_ip: str
    etcd_port: int
    gateway_http: int
    gateway_grpc: int
    hosts: list[Host]
    schedulers: dict[str, ChildProcess] = field(default_factory=dict)
    scheduler_env: dict[str, dict[str, str]] = field(default_factory=dict)
    api_key: str = ""

    @property
    def etcd_endpoints(self) -> str:
        return address(self.etcd_port)

    @property
    def api_url(self) -> str:
        return f"http://{address(self.gateway_http)}"

    @property
    def grpc_target(self) -> str:
        return address(self.gateway_grpc)

    def e2b_env(self) -> dict[str, str]:
        lines = e2b_env_lines(self.api_key, self.api_url, self.api_url)
        return dict(line.split("=", 1) for line in lines)

    async def start_scheduler(self, name: str) -> None:
        env = self.scheduler_env[name]
        child = await ChildProcess.spawn(
            name, [sys.executable, "-m", "aenv_scheduler"], env, self.home / f"{name}.log"
        )
        self.schedulers[name] = child
        await _until_ready(child, GrpcHealthProbe(env["AENV_SCHEDULER_LISTEN"]))


async def kill_all(client: GatewayClient) -> None:
    """Kills every sandbox the cluster lists."""
    records = await client.list_sandboxes()
    killed = await asyncio.gather(
        *(client.kill_sandbox(r.sandbox_id) for r in records), return_exceptions=True
    )
    # NotFound: gone meanwhile (a listing may still show a sandbox being killed).
    assert all(k is None or isinstance(k, NotFound) for k in killed), killed


async def _until_ready(child: ChildProcess, probe: Probe) -> None:
    async with asyncio.timeout(START_TIMEOUT_S):
        while not await probe.ready():
            if child.returncode is not None:
                raise RuntimeError(f"{child.name} exited: {child.log_tail()}")
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def running_cluster(
    home: Path,
    *,
    hosts: int = 3,
    schedulers: int = 2,
    node_env: Mapping[str, str] | None = None,
    scheduler_env: Mapping[str, str] | None = None,
) -> AsyncIterator[Cluster]:
    """The cluster, ready; once it ends nothing of it is left (netns, links, QEMU)."""
    tag = "acl" + "".join(secrets.choice("abcdefghij") for _ in range(3))
    subnet = ipaddress.IPv4Network(free_subnet(24))
    bridge_ip = str(subnet.network_address + 1)
    bridge = f"{tag}br"
    ports = free_platform_ports()
    base = service_environment(home, ports, os.environ)
    # One secrets key for the cluster, as a deployment mounts it: every host seals and opens alike.
    base.setdefault("AENV_SECRETS_KEY_FILE", str(home / "secrets.key"))
    cluster = Cluster(
        home, bridge_ip, ports.etcd_client, ports.gateway_http, ports.gateway_grpc, []
    )
    children: list[ChildProcess] = []
    async with contextlib.AsyncExitStack() as stack:
        _ip("link", "add", bridge, "type", "bridge")
        stack.callback(_ip, "link", "del", bridge)
        _ip("addr", "add", f"{bridge_ip}/{subnet.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(hosts):
            host = _host(
                home,
                tag,
                i,
                str(subnet.network_address + 10 + i),
                base,
                ports,
                bridge_ip,
                node_env or {},
            )
            _ip("netns", "add", host.netns)
            stack.callback(_ip, "netns", "del", host.netns)
            _ip(
                "link",
                "add",
                host.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            )
            stack.callback(_ip, "link", "del", host.veth)
            _ip("link", "set", host.veth, "master", bridge, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.ip}/{subnet.prefixlen}", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            cluster.hosts.append(host)

        async def stop_children() -> None:
            for host in reversed(cluster.hosts):
                await host.stop()
                assert netns_names(host.slot_prefix) == []
                assert qemu_pids_under(host.home) == []
            while cluster.schedulers:
                await cluster.schedulers.popitem()[1].stop(10)
            while children:
                await children.pop().stop(10)

        stack.push_async_callback(stop_children)
        etcd = await ChildProcess.spawn(
            "etcd", _etcd_argv(home, ports, bridge_ip), base, home / "etcd.log"
        )
        children.append(etcd)
        await _until_ready(etcd, HttpHealthProbe(f"http://{address(ports.etcd_client)}/health"))
        snapstore_address = f"{bridge_ip}:{ports.snapstore}"
        # Volumes' NFS server on the bridge too: the hosts' relays dial it there (it advertises
        # the address it bound); nothing else of a host reaches it without a ticket.
        snapstore = await ChildProcess.spawn(
            "snapstore",
            [sys.executable, "-m", "aenv_snapstore"],
            base
            | {
                "AENV_SNAPSTORE_LISTEN": snapstore_address,
                "AENV_SNAPSTORE_VOLUME_NFS_LISTEN": f"{bridge_ip}:{free_port()}",
            },
            home / "snapstore.log",
        )
        children.append(snapstore)
        await _until_ready(snapstore, GrpcHealthProbe(snapstore_address))
        scheduler_addresses = []
        for n in range(schedulers):
            name = f"scheduler-{n}"
            listen = address(free_port())
            scheduler_addresses.append(listen)
            cluster.scheduler_env[name] = (
                base
                | {
                    "AENV_SCHEDULER_LISTEN": listen,
                    "AENV_SCHEDULER_METRICS_LISTEN": address(free_port()),
                    "AENV_SCHEDULER_INSTANCE_ID": name,
                }
                | dict(scheduler_env or {})
            )
            await cluster.start_scheduler(name)
        await asyncio.gather(*(host.start() for host in cluster.hosts))
        gateway = await ChildProcess.spawn(
            "gateway",
            [sys.executable, "-m", "aenv_gateway"],
            base
            | {
                "AENV_GATEWAY_SCHEDULER_ADDRESS": ",".join(scheduler_addresses),
                "AENV_GATEWAY_SNAPSTORE_ADDRESS": snapstore_address,
            },
            home / "gateway.log",
        )
        children.append(gateway)
        await _until_ready(gateway, HttpHealthProbe(f"{cluster.api_url}/health"))
        cluster.api_key = read_api_key(home)
        yield cluster


def _host(
    home: Path,
    tag: str,
    index: int,
    ip: str,
    base: dict[str, str],
    ports: PlatformPorts,
    bridge_ip: str,
    overrides: Mapping[str, str],
) -> Host:
    letter = "abcdefgh"[index]
    host_home = home / f"host-{letter}"
    env = (
        base
        | {
            "AENV_HOME": str(host_home),
            "AENV_OTEL_TRACE_DIR": str(host_home / "traces"),
            "AENV_ETCD_ENDPOINTS": f"{bridge_ip}:{ports.etcd_client}",
            "AENV_NODEAGENT_NODE_ID": f"host-{letter}",
            "AENV_NODEAGENT_LISTEN": f"{ip}:{NODEAGENT_PORT}",
            "AENV_NODEAGENT_PROXY_LISTEN": f"{ip}:{PROXY_PORT}",
            "AENV_NODEAGENT_METRICS_LISTEN": f"{ip}:{METRICS_PORT}",
            "AENV_NODEAGENT_SNAPSTORE_ADDRESS": f"{bridge_ip}:{ports.snapstore}",
            "AENV_NODEAGENT_STATE_DIR": str(host_home / "state"),
            "AENV_NODEAGENT_CACHE_DIR": str(shared_cache_dir()),
            "AENV_NODEAGENT_NET_PREFIX": f"{tag}{letter}",
            "AENV_NODEAGENT_NET_POOL_CIDR": free_subnet(24),
            "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER": "false",
            # Each host jails its VMs under uids of its own, as separate machines would.
            "AENV_NODEAGENT_VMM_UID_FIRST": str(VMM_UID_FIRST + index * VMM_UID_COUNT),
            "AENV_NODEAGENT_VMM_UID_COUNT": str(VMM_UID_COUNT),
            FORWARD_DESTINATIONS: "[]",
        }
        | dict(overrides)
    )
    return Host(
        f"host-{letter}", f"{tag}h{letter}", f"{tag}v{letter}", ip, host_home, f"{tag}{letter}", env
    )


def _etcd_argv(home: Path, ports: PlatformPorts, bridge_ip: str) -> list[str]:
    """etcd on loopback (the root namespace's services) and the bridge (the hosts)."""
    clients = f"http://{address(ports.etcd_client)},http://{bridge_ip}:{ports.etcd_client}"
    peer = f"http://{address(ports.etcd_peer)}"
    return [
        ETCD_BINARY,
        "--name=aenv",
        f"--data-dir={home / 'etcd'}",
        f"--listen-client-urls={clients}",
        f"--advertise-client-urls={clients}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=aenv={peer}",
        "--logger=zap",
        "--log-outputs=stderr",
    ]
