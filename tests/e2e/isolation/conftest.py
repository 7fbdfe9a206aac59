"""Two sandboxes of the shared platform for the whole package: a victim listening on a port, and
an attacker whose guest runs `hostile.py` as root. Both are found on the host (QEMU, netns,
addresses) the way an operator would find them."""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform

from ...conftest import sdk_environment_of
from .host import HostSide, host_side

# Every test here: real VMs, netns, etcd, the E2B SDK, on the platform's session loop.
MARKS = [
    pytest.mark.vm,
    pytest.mark.sdk,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]
HOSTILE = Path(__file__).with_name("hostile.py")
GUEST_SCRIPT = "/root/hostile.py"
VICTIM_PORT = 8080
VICTIM_GREETING = "victim-here"


@dataclass(frozen=True)
class Guest:
    """A sandbox seen from its guest (through envd, as root) and from the host."""

    sandbox: Sandbox
    host: HostSide

    def sh(self, script: str, timeout_s: float = 300) -> str:
        result = self.sandbox.commands.run(
            script, user="root", timeout=timeout_s, request_timeout=timeout_s + 30
        )
        return result.stdout

    def hostile(self, plan: object, timeout_s: float = 300) -> Any:
        out = self.sh(f"python3 {GUEST_SCRIPT} {shlex.quote(json.dumps(plan))}", timeout_s)
        return json.loads(out.strip().splitlines()[-1])

    def round_trip_s(self) -> float:
        """One command through envd and back."""
        started = time.monotonic()
        self.sh("true", timeout_s=60)
        return time.monotonic() - started


@pytest.fixture(scope="package")
def sdk_environment(platform: Platform) -> Iterator[None]:
    """The SDK reads its endpoints and key from the environment, for the whole package."""
    with sdk_environment_of(platform):
        yield


@contextlib.contextmanager
def running_guest(platform: Platform, net_prefix: str) -> Iterator[Guest]:
    """A new sandbox with `hostile.py` in it, killed when the block ends."""
    sandbox = Sandbox.create(timeout=900)
    try:
        sandbox.files.write(GUEST_SCRIPT, HOSTILE.read_text(), user="root")
        yield Guest(sandbox, host_side(platform.home, net_prefix, sandbox.sandbox_id))
    finally:
        sandbox.kill()


@pytest.fixture(scope="package")
def victim(platform: Platform, net_prefix: str, sdk_environment: None) -> Iterator[Guest]:
    with running_guest(platform, net_prefix) as guest:
        guest.sh(
            f"cd /tmp && echo {VICTIM_GREETING} > index.html && setsid python3 -m "
            f"http.server {VICTIM_PORT} >/dev/null 2>&1 < /dev/null & "
            f"for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:{VICTIM_PORT}/ "
            "&& break; sleep 0.2; done"
        )
        yield guest


@pytest.fixture(scope="package")
def attacker(platform: Platform, net_prefix: str, sdk_environment: None) -> Iterator[Guest]:
    with running_guest(platform, net_prefix) as guest:
        yield guest
