"""Fixtures of the cross-service tests: a whole single-node platform (etcd, scheduler, snapstore,
node agent, gateway), started as `aenv up` starts it, with a temporary home and free ports."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.edge import PublicEdge
from aenv_cli.platform import Platform
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.confinement.choice import node_key
from aenv_testing.platform_ports import free_platform_ports
from aenv_testing.subnets import free_subnet

# Host-based routing (`<port>-<id>.<domain>`) is on for the shared platform; the SDKs still
# reach envd through E2B_SANDBOX_URL, which takes precedence over the returned domain.
GATEWAY_DOMAIN = "sbx.aenv.test"
# The node agent samples sandbox metrics every 5 s by default; tests wait for a few samples.
METRICS_INTERVAL_S = 1.0
BUILD_READY_TIMEOUT_S = 15.0


def shared_cache_dir() -> Path:
    """Guest artifacts and template snapshots are keyed by their inputs: every run may share
    them (`make setup` builds them where the node agent looks by default)."""
    return NodeAgentSettings().resolved_cache_dir()


def netns_names(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix + "-")]


def qemu_pids_under(path: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"qemu-system" in cmd and str(path).encode() in cmd:
                pids.append(int(proc.name))
    return pids


def vm_cgroups(state_dir: Path) -> list[Path]:
    """The VM cgroups (every hierarchy's) of the node agent whose state dir is `state_dir`."""
    slice_name = f"aenv-{node_key(state_dir)}"
    return [
        vm
        for top in Path("/sys/fs/cgroup").iterdir()
        for found in top.rglob(slice_name)
        for vm in found.glob("vm-*")
    ]


# The node setting test platforms set to [] (no guest traffic forwarded off the machine).
FORWARD_DESTINATIONS = "AENV_NODEAGENT_EGRESS_FORWARD_DESTINATIONS"


def lone_platform_env(prefix: str, pool_prefixlen: int = 22, **settings: str) -> dict[str, str]:
    """The environment of a platform of a test's own (a fault it causes must not reach the
    shared one): this process's, the shared artifact cache, its own netns prefix and address
    pool, no code-interpreter prewarm; then `settings`."""
    return dict(os.environ) | {
        "AENV_NODEAGENT_CACHE_DIR": str(shared_cache_dir()),
        "AENV_NODEAGENT_NET_PREFIX": prefix,
        "AENV_NODEAGENT_NET_POOL_CIDR": free_subnet(pool_prefixlen),
        "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER": "false",
    } | settings


@pytest.fixture(scope="session")
def net_prefix() -> str:
    return "aee" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "x"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def platform(
    tmp_path_factory: pytest.TempPathFactory, net_prefix: str
) -> AsyncIterator[Platform]:
    home = tmp_path_factory.mktemp("aenv-home")
    env = dict(os.environ)
    env.update(
        {
            "AENV_NODEAGENT_CACHE_DIR": str(shared_cache_dir()),
            "AENV_NODEAGENT_NET_PREFIX": net_prefix,
            "AENV_NODEAGENT_NET_POOL_CIDR": free_subnet(20),
            "AENV_NODEAGENT_NODE_ID": "e2e-node",
            "AENV_GATEWAY_DOMAIN": GATEWAY_DOMAIN,
            "AENV_NODEAGENT_METRICS_INTERVAL_S": str(METRICS_INTERVAL_S),
            # The template tests' ready command that never succeeds gives up this soon.
            "AENV_NODEAGENT_BUILD_READY_TIMEOUT_S": str(BUILD_READY_TIMEOUT_S),
            # Captured once per cache, in the background from the start (the code-interpreter
            # tests, first in order, wait for it).
            "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER": "true",
            # A killed fork child's copy-on-write volume clones go within ~30 s, not minutes
            # (tests/e2e/test_volumes.py waits for them).
            "AENV_GATEWAY_VOLUME_SWEEP_INTERVAL_S": "2",
            "AENV_GATEWAY_VOLUME_SWEEP_GRACE_S": "30",
            # The webhook tests' receivers listen on loopback.
            "AENV_GATEWAY_WEBHOOKS_ALLOW_PRIVATE": "true",
        }
    )
    async with running_platform(home, env, net_prefix) as plat:
        yield plat


@contextlib.asynccontextmanager
async def running_platform(
    home: Path, env: dict[str, str], net_prefix: str, edge: PublicEdge | None = None
) -> AsyncIterator[Platform]:
    """A platform on free ports; once stopped, nothing of it may be left (netns, QEMU). Its
    node forwards no guest traffic unless `env` names destinations: nothing a test's guest
    sends may leave the machine."""
    env = {FORWARD_DESTINATIONS: "[]"} | env
    plat = Platform(home, free_platform_ports(), base_env=env, edge=edge)
    await plat.start()
    try:
        yield plat
    finally:
        await plat.stop()
        assert netns_names(net_prefix) == []
        assert qemu_pids_under(home) == []


@contextlib.contextmanager
def sdk_environment_of(platform: Platform) -> Iterator[None]:
    """The SDK reads its endpoints and key from the environment: this platform's, meanwhile."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in platform.e2b_env().items():
            patch.setenv(name, value)
        patch.delenv("E2B_DEBUG", raising=False)
        yield


@pytest.fixture
def e2b_env(platform: Platform) -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    env.update(platform.e2b_env())
    env.pop("E2B_DEBUG", None)
    yield env
