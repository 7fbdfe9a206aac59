"""A node agent crash keeps each running sandbox's egress exactly: the crashed agent's egress
process dies with it (nothing else kills it: a crash ends the agent alone), and the successor,
re-adopting the sandbox, enforces its recorded policy through an egress process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from e2b import Sandbox, SandboxNetworkUpdate

from aenv_cli.platform import Platform

from .conftest import create, fetch, trust_test_ca
from .internet import ALLOWED, OTHER, Internet

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

ONLY_ALLOWED: SandboxNetworkUpdate = {"allow_out": [ALLOWED], "deny_out": ["0.0.0.0/0"]}


def reaches(sandbox: Sandbox) -> dict[str, bool]:
    return {name: fetch(sandbox, f"http://{name}/echo").code == 200 for name in (ALLOWED, OTHER)}


def egress_processes(platform: Platform) -> set[int]:
    """The egress processes of this platform's node agents (found by the agent's net prefix,
    which they inherit in their environment)."""
    marker = f"AENV_NODEAGENT_NET_PREFIX={platform.service_env()['AENV_NODEAGENT_NET_PREFIX']}"
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"aenv_nodeagent.egress" not in cmdline.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker.encode() in environ.read().split(b"\0"):
                    found.add(int(entry))
    return found


async def test_a_node_agent_crash_keeps_the_sandboxs_egress(
    egress_sdk: Platform, internet: Internet
) -> None:
    sandbox = await asyncio.to_thread(create, ONLY_ALLOWED)
    try:
        await asyncio.to_thread(trust_test_ca, sandbox, internet)
        assert await asyncio.to_thread(reaches, sandbox) == {ALLOWED: True, OTHER: False}
        before = egress_processes(egress_sdk)
        assert len(before) == 1

        await egress_sdk.restart_service("nodeagent", crash=True)

        after = egress_processes(egress_sdk)
        assert len(after) == 1 and not after & before  # the old one died with its agent
        assert await asyncio.to_thread(reaches, sandbox) == {ALLOWED: True, OTHER: False}
    finally:
        await asyncio.to_thread(sandbox.kill)
