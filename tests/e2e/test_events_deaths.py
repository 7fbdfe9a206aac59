"""Lifecycle events and death certificates on the real platform: aenv_client's watch follows a
sandbox through created, paused, resumed and killed as it happens; E2B's events routes list them
(raw HTTP, the SDK's key); and a sandbox whose QEMU is SIGKILLed answers every later call, through
the unmodified e2b SDK and through aenv_client, with its death: cause vmm_crash."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxNotFoundException, SandboxNotRunningException

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import SandboxDied

pytestmark = [
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.sdk,
    pytest.mark.asyncio(loop_scope="session"),
]

CREATED, PAUSED, RESUMED, KILLED, DIED = (
    c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_PAUSED, c.SANDBOX_EVENT_TYPE_RESUMED,
    c.SANDBOX_EVENT_TYPE_KILLED, c.SANDBOX_EVENT_TYPE_DIED)


def qemu_pid_of(home: Path, sandbox_id: str) -> int:
    """The QEMU of this sandbox (this test's own, nobody else's): the pid its pidfile in the
    node's state dir (`sandboxes/<id>/vm/qemu.pid`) names, checked to be a QEMU."""
    pids = set()
    for pidfile in home.rglob("qemu.pid"):
        if sandbox_id in pidfile.parts:
            with contextlib.suppress(OSError, ValueError):
                pid = int(pidfile.read_text().strip())
                if b"qemu-system" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.add(pid)
    assert len(pids) == 1, (sandbox_id, pids)
    return pids.pop()


async def seen(
    events: list[c.SandboxEvent], sandbox_id: str, type_: int, within_s: float
) -> c.SandboxEvent:
    deadline = time.monotonic() + within_s
    while True:
        for e in events:
            if e.sandbox_id == sandbox_id and e.type == type_:
                return e
        assert time.monotonic() < deadline, f"no {type_} event of {sandbox_id} in {within_s} s"
        await asyncio.sleep(0.1)


async def test_watch_list_and_a_vmm_crash_named_everywhere(
    platform: Platform, sdk_env: None,
) -> None:
    tag = uuid.uuid4().hex[:12]
    made: list[str] = []
    events: list[c.SandboxEvent] = []
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:

        async def watch() -> None:
            async for e in client.watch_events(metadata={"e2e": tag}):
                events.append(e)

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.sleep(0.5)  # the stream is open before the first change
            sbx = await AsyncSandbox.create("base", metadata={"e2e": tag}, timeout=300)
            made.append(sbx.sandbox_id)
            sid = sbx.sandbox_id
            await seen(events, sid, CREATED, 30)
            assert await sbx.pause() is True
            await seen(events, sid, PAUSED, 60)
            await AsyncSandbox.connect(sid)
            await seen(events, sid, RESUMED, 60)
            await sbx.kill()
            killed = await seen(events, sid, KILLED, 30)
            assert killed.metadata["e2e"] == tag and killed.owner_key_id

            # E2B's events routes, as its docs call them (raw HTTP, X-API-Key).
            async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], timeout=30) as http:
                key = {"X-API-Key": os.environ["E2B_API_KEY"]}
                listed = await http.get(f"/events/sandboxes/{sid}", headers=key,
                                        params={"orderAsc": "true", "limit": 100})
                assert listed.status_code == 200, listed.text
                types = [e["type"] for e in listed.json()]
                assert types[0] == "sandbox.lifecycle.created", types
                for name in ("paused", "resumed", "killed"):
                    assert f"sandbox.lifecycle.{name}" in types, types
                assert all(e["sandboxId"] == sid for e in listed.json())
                recent = await http.get("/events/sandboxes", headers=key,
                                        params=[("types", "sandbox.lifecycle.killed")])
                assert sid in {e["sandboxId"] for e in recent.json()}

            # A VMM crash: SIGKILL this sandbox's QEMU (found by its id in argv).
            doomed = await AsyncSandbox.create("base", metadata={"e2e": tag}, timeout=300)
            made.append(doomed.sandbox_id)
            assert (await doomed.commands.run("echo up")).stdout.strip() == "up"
            os.kill(qemu_pid_of(platform.home, doomed.sandbox_id), signal.SIGKILL)
            died = await seen(events, doomed.sandbox_id, DIED, 60)
            assert died.cause == c.DEATH_CAUSE_VMM_CRASH, died
            assert "signal 9" in died.detail

            # The SDK: its data-plane errors carry the certificate's words.
            with pytest.raises(SandboxNotRunningException) as run:
                await doomed.commands.run("echo again")
            assert "vmm_crash" in str(run.value)
            assert await doomed.is_running() is False
            # Its control-plane 404s are its own words (it drops the body's message; the raw
            # answer carries the certificate, asserted below).
            with pytest.raises(SandboxNotFoundException):
                await AsyncSandbox.connect(doomed.sandbox_id)
            with pytest.raises(SandboxNotFoundException):
                await doomed.set_timeout(60)
            assert await AsyncSandbox.kill(doomed.sandbox_id) is False
            async with httpx.AsyncClient(base_url=os.environ["E2B_API_URL"], timeout=30) as http:
                raw = await http.get(f"/sandboxes/{doomed.sandbox_id}",
                                     headers={"X-API-Key": os.environ["E2B_API_KEY"]})
                assert raw.status_code == 404
                assert raw.json()["message"].startswith(
                    f"sandbox {doomed.sandbox_id} died: vmm_crash (")

            # The native client, for a sandbox it did not make: SandboxDied with the cause.
            for call in (lambda: client.get_sandbox(doomed.sandbox_id),
                         lambda: client.run(doomed.sandbox_id, "true"),
                         lambda: client.kill_sandbox(doomed.sandbox_id)):
                with pytest.raises(SandboxDied) as gone:
                    await call()
                assert gone.value.cause == "vmm_crash" and "signal 9" in gone.value.detail
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            for sandbox_id in made:
                with contextlib.suppress(Exception):
                    await AsyncSandbox.kill(sandbox_id)
