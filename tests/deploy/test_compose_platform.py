"""The compose stack for real: deploy/compose/compose.yaml with its `two-nodes` profile (etcd,
scheduler, snapstore, gateway and two node agents in containers of their own: a simulated
two-node cluster on one Docker host), the image built here (tests/deploy/conftest.py).

The unmodified E2B SDK, on the host, reaches the gateway through its published loopback port:
sandboxes spread over both nodes (as each sandbox's record in etcd names them); one is paused on
nodeagent-a, whose container is then stopped, and the SDK resumes it on nodeagent-b with its
files there. Once every sandbox is killed and the node agents stopped, etcd holds no key of a
sandbox or a node; after `docker compose down -v` nothing of the stack is left on the host: no
container, volume or network of the project, no process (QEMU or other) or cgroup of its
containers, no link, netns or nftables table of its node agents' prefix.

Guest artifacts come from the host's cache (deploy/compose/compose.host-cache.yaml, copied into
each node's volume at its start); the node agents run without their warm pools, so every QEMU
is a sandbox's."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from e2b import Sandbox
from google.protobuf.message import Message

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster.codec import decode
from aenv_testing.ports import free_port

from .conftest import HOST_CACHE, REPO, docker, host_network_of

pytestmark = pytest.mark.docker

COMPOSE = "/usr/bin/docker-compose"
COMPOSE_DIR = REPO / "deploy" / "compose"
NODES = ("nodeagent-a", "nodeagent-b")
ETCD_PREFIX = "/aenv/v1"
# A loaded 2-core host: each node agent copies the host's cache (GBs) and may capture its
# templates again under TCG.
START_TIMEOUT_S = 1200
SDK_TIMEOUT_S = 300
KEPT = "/home/user/kept"

Record = TypeVar("Record", bound=Message)


@dataclasses.dataclass(frozen=True)
class Stack:
    project: str
    argv: list[str]
    env: dict[str, str]
    net_prefix: str

    def compose(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env, cwd=COMPOSE_DIR)
        if done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} failed: {done.stderr[-3000:]}")
        return done.stdout

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).strip()

    def etcd_keys(self, kind: str) -> list[str]:
        out = docker("exec", self.container("etcd"), "etcdctl", "get", "--prefix", "--keys-only",
                     f"{ETCD_PREFIX}/{kind}/")
        return [line for line in out.splitlines() if line]

    def record(self, kind: str, record_id: str, record_type: type[Record]) -> Record | None:
        out = docker("exec", self.container("etcd"), "etcdctl", "get", "-w", "json",
                     f"{ETCD_PREFIX}/{kind}/{record_id}")
        kvs = json.loads(out).get("kvs", [])
        if not kvs:
            return None
        return decode(record_type, base64.b64decode(kvs[0]["value"]))

    def sandbox_record(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        return self.record("sandboxes", sandbox_id, cluster_pb2.SandboxRecord)

    def offers_base(self, node_id: str) -> bool:
        """Whether the node's record is in etcd and names `base` among its cached templates,
        which placement prefers."""
        node = self.record("nodes", node_id, cluster_pb2.NodeRecord)
        return node is not None and "base" in node.cached_templates

    def project_objects(self) -> list[str]:
        """The project's containers, volumes and networks, as Docker labels them."""
        label = f"label=com.docker.compose.project={self.project}"
        found = docker("ps", "--all", "--quiet", "--filter", label).split()
        found += docker("volume", "ls", "--quiet", "--filter", label).split()
        found += docker("network", "ls", "--quiet", "--filter", label).split()
        return found


def override_file(tmp_path: Path, net_prefix: str) -> Path:
    """The test's settings of both node agents: its netns prefix, no warm pools, and pressure
    thresholds that other work on this shared machine does not cross."""
    node_env = {
        "AENV_NODEAGENT_NET_PREFIX": net_prefix,
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0",
        "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER": "false",
        "AENV_NODEAGENT_PRESSURE_MEMORY_AVAILABLE_MIN_MIB": "256",
        "AENV_NODEAGENT_PRESSURE_PSI_SOME_AVG10_MAX": "100",
    }
    path = tmp_path / "compose.test.yaml"
    path.write_text(yaml.safe_dump({"services": {n: {"environment": node_env} for n in NODES}}))
    return path


def healthy(stack: Stack, services: list[str]) -> bool:
    """Whether every service's container reports healthy; fails once one has stopped."""
    for service in services:
        cid = stack.container(service)
        if not cid:
            return False
        state = json.loads(docker("inspect", "--format", "{{json .State}}", cid))
        if not state["Running"]:
            raise AssertionError(f"{service} stopped:\n{docker('logs', cid)[-4000:]}")
        if state.get("Health", {}).get("Status") != "healthy":
            return False
    return True


def wait_healthy(stack: Stack, services: list[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(stack, services):
        assert time.monotonic() < deadline, f"{services} not healthy within {START_TIMEOUT_S} s"
        time.sleep(5)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        time.sleep(1)


def processes_of(container_ids: list[str]) -> list[str]:
    """Host processes whose cgroup names one of the containers (QEMU included)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if any(cid in cgroups for cid in container_ids):
            found.append(proc.name)
    return found


def cgroups_of(container_ids: list[str]) -> list[str]:
    """The host's cgroup directories (any hierarchy, a few levels down) naming a container."""
    found = []
    for top, dirs, _ in os.walk("/sys/fs/cgroup"):
        depth = top.count("/") - "/sys/fs/cgroup".count("/")
        if depth >= 4:
            dirs.clear()
        found += [f"{top}/{d}" for d in dirs if any(cid in d for cid in container_ids)]
    return found


@pytest.fixture
def stack(image: str, tmp_path: Path) -> Iterator[Stack]:
    """The stack up with both node agents; brought down with its volumes, also on failure."""
    project = f"aenv-test-compose-{secrets.token_hex(4)}"
    net_prefix = "adc" + secrets.token_hex(2) + "x"
    files = [COMPOSE_DIR / "compose.yaml"]
    if HOST_CACHE.is_dir():
        files.append(COMPOSE_DIR / "compose.host-cache.yaml")
    files.append(override_file(tmp_path, net_prefix))
    argv = [COMPOSE, "--project-name", project, "--profile", "two-nodes"]
    for path in files:
        argv += ["--file", str(path)]
    env = {
        "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
        "DOCKER_HOST": "unix:///var/run/docker.sock",
        "AENV_IMAGE": image, "AENV_HOST_CACHE": str(HOST_CACHE),
        "AENV_GATEWAY_PORT": str(free_port()), "AENV_GATEWAY_GRPC_PORT": str(free_port()),
    }
    made = Stack(project, argv, env, net_prefix)
    try:
        made.compose("up", "--detach", timeout=START_TIMEOUT_S)
        yield made
    finally:
        subprocess.run([*argv, "down", "--volumes", "--timeout", "120"], env=env, cwd=COMPOSE_DIR,
                       capture_output=True, timeout=600)


def test_sdk_spreads_over_two_nodes_and_a_paused_sandbox_outlives_its_node_container(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    wait_healthy(stack, ["gateway", *NODES])
    wait_for(lambda: all(stack.offers_base(node) for node in NODES), 120,
             "both nodes offering the base template")
    containers = stack.compose("ps", "-q").split()
    assert len(containers) == 6
    url = f"http://127.0.0.1:{stack.env['AENV_GATEWAY_PORT']}"
    key = docker("exec", stack.container("gateway"), "cat", "/var/lib/aenv/api-key").strip()
    for name, value in {"E2B_API_KEY": key, "E2B_API_URL": url, "E2B_SANDBOX_URL": url}.items():
        monkeypatch.setenv(name, value)
    made: list[Sandbox] = []
    try:
        # Placement: the least loaded node that caches the template, so one on each.
        made = [Sandbox.create("base", timeout=600, request_timeout=SDK_TIMEOUT_S)
                for _ in NODES]
        placed = {}
        for sandbox in made:
            record = stack.sandbox_record(sandbox.sandbox_id)
            assert record is not None
            placed[record.node_id] = sandbox
        assert sorted(placed) == list(NODES)

        moving = placed["nodeagent-a"]
        ran = moving.commands.run("echo -n on $((40+2))", timeout=SDK_TIMEOUT_S)
        assert ran.stdout == "on 42"
        moving.files.write(KEPT, "before the stop")
        assert moving.pause() is True

        def pushed() -> bool:
            record = stack.sandbox_record(moving.sandbox_id)
            return record is not None and bool(record.paused_image)

        wait_for(pushed, 120, "the paused state in snapstore")

        # nodeagent-a's container stopped: its node leaves the cluster, its paused sandbox stays.
        stack.compose("stop", "nodeagent-a", timeout=300)
        wait_for(lambda: stack.etcd_keys("nodes") == [f"{ETCD_PREFIX}/nodes/nodeagent-b"], 60,
                 "nodeagent-a gone from etcd")
        resumed = Sandbox.connect(moving.sandbox_id, timeout=600)
        record = stack.sandbox_record(moving.sandbox_id)
        assert record is not None and record.node_id == "nodeagent-b"
        assert record.state == cluster_pb2.SANDBOX_STATE_RUNNING
        assert resumed.files.read(KEPT) == "before the stop"
        again = resumed.commands.run("echo -n still $((40+2))", timeout=SDK_TIMEOUT_S)
        assert again.stdout == "still 42"
    finally:
        for sandbox in made:
            with contextlib.suppress(Exception):  # checked below: no sandbox key left
                Sandbox.kill(sandbox.sandbox_id)
    assert stack.etcd_keys("sandboxes") == []
    stack.compose("stop", "nodeagent-b", timeout=300)
    wait_for(lambda: stack.etcd_keys("nodes") == [], 60, "no node left in etcd")

    stack.compose("down", "--volumes", "--timeout", "120", timeout=600)
    assert stack.project_objects() == []
    assert processes_of(containers) == []
    assert cgroups_of(containers) == []
    assert host_network_of(stack.net_prefix) == []
