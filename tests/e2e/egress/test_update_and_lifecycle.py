"""A sandbox's egress policy changes only when asked: `update_network` switches it on a running
sandbox at once, an update that fails leaves the old one whole, and pause/resume and fork keep it
exactly (the fork child gets its parent's), and so do a snapshot, a reset to it
and an auto-resume."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import cast

import pytest
from e2b import (
    InvalidArgumentException,
    Sandbox,
    SandboxException,
    SandboxNetworkOpts,
    SandboxNetworkUpdate,
    SandboxState,
)

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform

from .conftest import create, fetch, trust_test_ca
from .internet import ALLOWED, OTHER, Internet

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

ONLY_ALLOWED: SandboxNetworkUpdate = {"allow_out": [ALLOWED], "deny_out": ["0.0.0.0/0"]}
ONLY_OTHER: SandboxNetworkUpdate = {"allow_out": [OTHER], "deny_out": ["0.0.0.0/0"]}


@pytest.fixture(scope="module")
def made() -> Iterator[list[Sandbox]]:
    """Every sandbox of the module, killed at its end (also on failure)."""
    sandboxes: list[Sandbox] = []
    try:
        yield sandboxes
    finally:
        for sandbox in sandboxes:
            sandbox.kill()


@pytest.fixture(scope="module")
def guest(egress_sdk: Platform, internet: Internet, made: list[Sandbox]) -> Sandbox:
    sandbox = create(ONLY_ALLOWED)
    made.append(sandbox)
    trust_test_ca(sandbox, internet)
    return sandbox


def reaches(sandbox: Sandbox) -> dict[str, bool]:
    return {name: fetch(sandbox, f"http://{name}/echo").code == 200 for name in (ALLOWED, OTHER)}


def test_update_network_switches_the_policy_of_a_running_sandbox(guest: Sandbox) -> None:
    assert reaches(guest) == {ALLOWED: True, OTHER: False}
    guest.update_network(ONLY_OTHER)
    assert reaches(guest) == {ALLOWED: False, OTHER: True}
    # Names only, then no names at all: an IP-only policy takes the egress path off.
    guest.update_network({"deny_out": ["0.0.0.0/0"]})
    assert reaches(guest) == {ALLOWED: False, OTHER: False}
    guest.update_network(ONLY_OTHER)
    assert reaches(guest) == {ALLOWED: False, OTHER: True}


@pytest.mark.parametrize(
    ("network", "named"),
    [
        ({"allow_out": ["bad..name.example"]}, "bad..name.example"),
        ({"allow_out": [f"api.*.{ALLOWED}"]}, f"api.*.{ALLOWED}"),
        ({**ONLY_OTHER, "rules": {ALLOWED: [{"transform": {"headers": {"X-A": "b"}}}]}},
         ALLOWED),
        ({**ONLY_OTHER, "rules": {OTHER: [{"transform": {"headers": {
            "X-Key": "${e2b.secrets.no-such-secret}"}}}]}}, "no-such-secret"),
    ],
)
def test_a_failing_update_leaves_the_old_policy_whole(
    guest: Sandbox, network: dict[str, object], named: str
) -> None:
    with pytest.raises((InvalidArgumentException, SandboxException)) as refused:
        guest.update_network(network)  # type: ignore[arg-type]
    assert named in str(refused.value)
    assert reaches(guest) == {ALLOWED: False, OTHER: True}
    info = guest.get_info()
    assert info.network is not None and info.network.get("allow_out") == [OTHER]


def test_pause_resume_and_fork_keep_the_policy(guest: Sandbox, made: list[Sandbox]) -> None:
    assert guest.pause() is True
    resumed = Sandbox.connect(guest.sandbox_id)
    assert reaches(resumed) == {ALLOWED: False, OTHER: True}
    children = resumed.fork(count=1, timeout=300)
    child = children[0]
    assert isinstance(child, Sandbox), child
    made.append(child)
    assert reaches(child) == {ALLOWED: False, OTHER: True}
    # The child's policy is its own from now on.
    child.update_network(ONLY_ALLOWED)
    assert reaches(child) == {ALLOWED: True, OTHER: False}
    assert reaches(resumed) == {ALLOWED: False, OTHER: True}


def test_a_snapshot_and_a_reset_keep_the_policy(guest: Sandbox, egress_sdk: Platform) -> None:
    before = reaches(guest)
    assert False in before.values(), before  # a policy that refuses something, to be kept
    snapshot = guest.create_snapshot()
    try:
        assert reaches(guest) == before
        asyncio.run(_reset(egress_sdk, guest.sandbox_id, snapshot.snapshot_id))
        assert reaches(guest) == before
    finally:
        Sandbox.delete_snapshot(snapshot.snapshot_id)


async def _reset(platform: Platform, sandbox_id: str, snapshot_id: str) -> None:
    """The native API's reset (the SDK has none): the sandbox back to the snapshot's state."""
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        await client.reset_sandbox(sandbox_id, snapshot_id)


def test_auto_resume_keeps_the_policy(
    egress_sdk: Platform, internet: Internet, made: list[Sandbox],
) -> None:
    sandbox = Sandbox.create(timeout=900, network=cast(SandboxNetworkOpts, ONLY_ALLOWED),
                             lifecycle={"on_timeout": "pause", "auto_resume": True})
    made.append(sandbox)
    trust_test_ca(sandbox, internet)
    assert sandbox.pause() is True
    # The next command's request wakes it through the data plane (no connect).
    assert reaches(sandbox) == {ALLOWED: True, OTHER: False}
    assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.RUNNING
