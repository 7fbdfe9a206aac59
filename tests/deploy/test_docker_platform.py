"""The Docker image for real: built here (deploy/docker/build.sh, no Docker Hub), the whole platform
(`aenv up`) in one container, and the unmodified E2B SDK creating a sandbox through it, running a
command and killing it. Afterwards the container is gone and nothing of it is left on the host.

The container has its own network namespace (Docker's bridge, without NAT: see
scripts/setup-docker.sh): the platform's loopback ports, netns, taps and nftables tables live and
die with it, and its node agent's names carry a prefix of this test's own, checked absent from
the host. The SDK (this checkout's .venv) runs in that namespace through nsenter, reaching the
gateway on the container's loopback as a program beside `aenv up` would. Guest artifacts come
from the host's cache, mounted read-only and copied in at start (deploy/docker/aenv-container-up);
what does not fit the image's Debian packages (the tools disk, then the templates) is rebuilt
there, offline."""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import qemu_pids_under
from .conftest import DOCKER, HOST_CACHE, docker, host_network_of

pytestmark = pytest.mark.docker

HOME_IN_CONTAINER = "/var/lib/aenv"
# Everything but CAP_SYS_RESOURCE, which this host's own bounding set lacks (so --privileged
# fails): netns, taps, nftables and mounts need the rest; seccomp and AppArmor would refuse them.
CONTAINER_RIGHTS = [
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
    "--device", "/dev/kvm", "--device", "/dev/net/tun",
]
# A loaded 2-core host: the cache copy, etcd and four services, a TCG guest's first boot.
START_TIMEOUT_S = 900

SDK_PROGRAM = """
import json
from e2b import Sandbox
sandbox = Sandbox.create("base", timeout=600, request_timeout=300)
result = sandbox.commands.run("echo hello from $(uname -s)", timeout=300)
listed = [s.sandbox_id for s in Sandbox.list().next_items()]
sandbox.kill()
after = [s.sandbox_id for s in Sandbox.list().next_items()]
print(json.dumps({"id": sandbox.sandbox_id, "stdout": result.stdout, "listed": listed,
                  "after": after}))
"""


def container_state(name: str) -> dict[str, object]:
    state: dict[str, object] = json.loads(docker("inspect", "--format", "{{json .State}}", name))
    return state


def wait_for_platform(name: str) -> dict[str, str]:
    """The SDK's settings `aenv up` writes once every service is ready; fails as soon as the
    container stops (with its log), or after START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not container_state(name)["Running"]:
            raise AssertionError(f"container stopped:\n{docker('logs', name)[-4000:]}")
        done = subprocess.run([DOCKER, "exec", name, "cat", f"{HOME_IN_CONTAINER}/e2b.env"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and "E2B_API_KEY=" in done.stdout:
            return dict(line.split("=", 1) for line in done.stdout.split())
        time.sleep(2)
    raise AssertionError(f"platform not ready within {START_TIMEOUT_S} s")


@dataclasses.dataclass(frozen=True)
class Running:
    name: str
    net_prefix: str
    sdk_env: dict[str, str]


@pytest.fixture
def platform_container(image: str) -> Iterator[Running]:
    """`aenv up` in a container. Stopped as `aenv up` is (SIGTERM, which stops every sandbox),
    then removed with its volumes, also on failure."""
    name = f"aenv-test-{secrets.token_hex(4)}"
    prefix = "adk" + secrets.token_hex(2) + "x"
    node = ["-e", f"AENV_NODEAGENT_NET_PREFIX={prefix}",
            # Guests only as asked: a 2-core host boots each under TCG.
            "-e", "AENV_NODEAGENT_WARM_POOL_VMS=0",
            "-e", "AENV_NODEAGENT_WARM_POOL_GUESTS=0",
            "-e", "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER=false"]
    mounts = ["-v", f"{HOST_CACHE}:/aenv-host-cache:ro"] if HOST_CACHE.is_dir() else []
    docker("run", "-d", "--name", name, *CONTAINER_RIGHTS, *node, *mounts, image,
           "aenv-container-up")
    try:
        yield Running(name, prefix, wait_for_platform(name))
        docker("stop", "--time", "120", name, timeout=300)
        assert container_state(name)["ExitCode"] == 0, docker("logs", name)[-4000:]
    finally:
        docker("rm", "--force", "--volumes", name, check=False, timeout=300)
    assert host_network_of(prefix) == []


def test_e2b_sdk_runs_a_sandbox_on_the_platform_in_a_container(
    platform_container: Running,
) -> None:
    pid = str(container_state(platform_container.name)["Pid"])
    sdk = subprocess.run(
        ["nsenter", "--target", pid, "--net", sys.executable, "-c", SDK_PROGRAM],
        capture_output=True, text=True, timeout=1200,
        env={"PATH": "/usr/bin:/bin", **platform_container.sdk_env},
    )
    assert host_network_of(platform_container.net_prefix) == []
    assert sdk.returncode == 0, sdk.stderr[-4000:]
    report = json.loads(sdk.stdout.splitlines()[-1])
    assert report["stdout"] == "hello from Linux\n"
    assert report["id"] in report["listed"] and report["id"] not in report["after"]


def test_nothing_of_the_container_is_left_on_the_host() -> None:
    """Runs after the container's removal: no QEMU of its home, no container named by the
    tests."""
    assert qemu_pids_under(Path(HOME_IN_CONTAINER)) == []
    assert docker("ps", "--all", "--quiet", "--filter", "name=aenv-test-") == ""
