"""A sandbox's egress policy changes only when asked: `update_network` switches it on a running
sandbox at once, an update that fails leaves the old one whole, and pause/resume and fork keep it
exactly (the fork child gets its parent's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2b import InvalidArgumentException, Sandbox, SandboxException, SandboxNetworkUpdate

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
