"""Egress by name end to end: the test internet (internet.py) and a platform of the package's own
whose node agent resolves through the test internet's dnsmasq and trusts its CA upstream, so
guests reach the test hosts by name through the node's egress process."""

from __future__ import annotations

import contextlib
import secrets
import shlex
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
import pytest_asyncio
from e2b import CommandExitException, Sandbox, SandboxNetworkOpts, SandboxNetworkUpdate

from aenv_cli.platform import Platform

from ...conftest import lone_platform_env, running_platform, sdk_environment_of
from .internet import Internet, running_internet

# What the guest's curl trusts: its system bundle (with the cluster's egress CA, for hosts with
# header rules) plus the test CA (hosts without rules show the guest their own certificates, as
# a real origin would).
GUEST_CA = "/tmp/test-internet-bundle.pem"
CURL_TIMEOUT_S = 20
PROBE = "/root/guest_probe.py"  # guest_probe.py, in every guest


@pytest.fixture(scope="package")
def internet() -> Iterator[Internet]:
    with running_internet() as net:
        yield net


@pytest_asyncio.fixture(scope="package", loop_scope="session")
async def egress_platform(
    tmp_path_factory: pytest.TempPathFactory, internet: Internet
) -> AsyncIterator[Platform]:
    prefix = "aeg" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "x"
    # Debug logs: the egress decisions are logged too, and must hold no secret either.
    env = lone_platform_env(prefix) | internet.node_env() | {
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0", "AENV_LOG_LEVEL": "DEBUG"}
    async with running_platform(tmp_path_factory.mktemp("egress-home"), env, prefix) as plat:
        yield plat


@pytest.fixture(scope="package")
def egress_sdk(egress_platform: Platform) -> Iterator[Platform]:
    """The SDK's endpoints and key in the environment, for the whole package."""
    with sdk_environment_of(egress_platform):
        yield egress_platform


def logged_anywhere(platform: Platform, text: str) -> list[str]:
    """The platform's service logs (the egress process's lines go to the node agent's) that
    hold `text`."""
    return [log.name for log in sorted((platform.home / "logs").glob("*.log"))
            if text.encode() in log.read_bytes()]


@dataclass(frozen=True)
class Fetch:
    code: int  # HTTP status; 0: no answer (refused, reset, unresolved, timed out)
    body: str
    error: str = ""  # curl's own message, when it had one


def create(network: SandboxNetworkUpdate) -> Sandbox:
    """A sandbox with this egress policy (create takes the same fields update_network does)."""
    return Sandbox.create(timeout=900, network=cast(SandboxNetworkOpts, network))


@contextlib.contextmanager
def guest_with(network: SandboxNetworkUpdate, internet: Internet) -> Iterator[Sandbox]:
    """A sandbox with this policy, trusting the test CA and holding the probe; killed after."""
    sandbox = create(network)
    try:
        trust_test_ca(sandbox, internet)
        sandbox.files.write(PROBE, (Path(__file__).parent / "guest_probe.py").read_text(),
                            user="root")
        yield sandbox
    finally:
        sandbox.kill()


def guest_sh(sandbox: Sandbox, script: str, timeout_s: float = 120) -> tuple[int, str]:
    """(exit code, stdout) of a root shell script in the guest."""
    try:
        done = sandbox.commands.run(script, user="root", timeout=timeout_s,
                                    request_timeout=timeout_s + 30)
    except CommandExitException as failed:
        return failed.exit_code, failed.stdout
    return done.exit_code, done.stdout


def fetch(sandbox: Sandbox, url: str, *curl_args: str) -> Fetch:
    """curl in the guest; the guest trusts the test CA besides its system store."""
    status, error = "\n--aenv-status--", "\n--aenv-error--\n"
    args = " ".join(shlex.quote(a) for a in [*curl_args, url])
    write_out = shlex.quote(status + "%{http_code}")
    _, out = guest_sh(sandbox, (
        f"curl -sS -m {CURL_TIMEOUT_S} --cacert {GUEST_CA} -w {write_out} {args} "
        f"2>/tmp/curl.err; printf {shlex.quote(error)}; cat /tmp/curl.err"))
    out, _, stderr = out.rpartition(error)
    body, _, code = out.rpartition(status)
    return Fetch(int(code or 0), body, stderr.strip())


def trust_test_ca(sandbox: Sandbox, internet: Internet) -> None:
    sandbox.files.write("/tmp/test-internet-ca.pem", internet.ca_pem, user="root")
    code, _ = guest_sh(sandbox, "cat /etc/ssl/certs/ca-certificates.crt "
                                f"/tmp/test-internet-ca.pem > {GUEST_CA}")
    assert code == 0
