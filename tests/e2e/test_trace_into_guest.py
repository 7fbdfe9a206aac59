"""The W3C trace context reaches the guest: a create's trace holds a span envd made inside the
sandbox (its /init), recorded on the host without the guest reaching any collector, and
`aenv trace <sandbox>` draws it in the create's tree."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.telemetry import read_trace_files

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


async def test_a_create_trace_reaches_envd_in_the_guest(platform: Platform) -> None:
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        sandbox = await client.create_sandbox("base", timeout_seconds=600)
        await client.kill_sandbox(sandbox.sandbox_id)

    spans = read_trace_files(platform.home / "traces")
    (create,) = [s for s in spans if s["name"] == "sandbox.create"
                 and s["service"] == "nodeagent"
                 and s["attributes"].get("aenv.sandbox_id") == sandbox.sandbox_id]
    in_trace = {s["span_id"]: s for s in spans if s["trace_id"] == create["trace_id"]}
    (envd,) = [s for s in in_trace.values() if s["service"] == "envd"]
    assert envd["name"] == "envd POST /init"
    assert in_trace[envd["parent_id"]]["service"] == "nodeagent"  # its caller's span

    shown = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "aenv_cli", "trace", sandbox.sandbox_id,
                         "--home", str(platform.home)],
        capture_output=True, text=True, timeout=60, check=True)
    assert "envd POST /init" in shown.stdout, shown.stdout
