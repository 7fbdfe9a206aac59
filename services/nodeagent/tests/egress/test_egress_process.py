"""The real egress process as the supervisor starts it: an unprivileged uid without
capabilities or a way to regain them, and gone as soon as its node agent is."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest

from aenv_nodeagent.egress.certs import EgressCA
from aenv_nodeagent.egress.control import Configure
from aenv_nodeagent.egress.supervisor import EgressSupervisor, SupervisorSettings

EGRESS_UID = 999_999_999

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="drops from root to another uid")


def configure() -> Configure:
    ca = EgressCA.generate()
    return Configure(secrets_key=os.urandom(32), ca_cert_pem=ca.cert_pem.decode(),
                     ca_key_pem=ca.key_pem().decode(), dns_upstreams=["192.0.2.53"],
                     upstream_ca_file=None, etcd_endpoints="", etcd_prefix="/t",
                     blocked_extra=["10.211.0.0/16"])


async def _sink(netns: str, addresses: list[str], ttl_s: float) -> None:
    return None


@pytest.fixture
async def supervisor() -> AsyncIterator[EgressSupervisor]:
    started = EgressSupervisor(SupervisorSettings(EGRESS_UID), configure(), _sink)
    await started.start()
    yield started
    await started.stop()


def status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as lines:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


async def test_it_runs_unprivileged(supervisor: EgressSupervisor) -> None:
    assert supervisor.pid is not None
    fields = status(supervisor.pid)
    assert fields["Uid"].split() == [str(EGRESS_UID)] * 4
    assert fields["Gid"].split() == [str(EGRESS_UID)] * 4
    assert fields["Groups"] == ""
    assert int(fields["CapEff"], 16) == int(fields["CapPrm"], 16) == 0
    assert fields["NoNewPrivs"] == "1"
    stats = await supervisor.stats()
    assert stats == {"slots": 0, "connections": 0, "rss_kib": stats["rss_kib"]}
    assert 10_000 < stats["rss_kib"] < 400_000


AGENT = """
import asyncio, os
from aenv_nodeagent.egress.certs import EgressCA
from aenv_nodeagent.egress.control import Configure
from aenv_nodeagent.egress.supervisor import EgressSupervisor, SupervisorSettings

async def sink(netns, addresses, ttl_s):
    return None

async def main():
    ca = EgressCA.generate()
    supervisor = EgressSupervisor(SupervisorSettings(UID), Configure(
        secrets_key=os.urandom(32), ca_cert_pem=ca.cert_pem.decode(),
        ca_key_pem=ca.key_pem().decode(), dns_upstreams=[], upstream_ca_file=None,
        etcd_endpoints="", etcd_prefix="/t", blocked_extra=[]), sink)
    await supervisor.start()
    print(supervisor.pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
""".replace("UID", str(EGRESS_UID))


async def test_it_dies_with_its_agent() -> None:
    agent = await asyncio.create_subprocess_exec(sys.executable, "-c", AGENT,
                                                 stdout=asyncio.subprocess.PIPE)
    try:
        assert agent.stdout is not None
        child = int(await asyncio.wait_for(agent.stdout.readline(), 60))
        assert status(child)["Uid"].split()[0] == str(EGRESS_UID)
    finally:
        agent.kill()  # SIGKILL: no clean-up of its own, only the kernel's death signal
        await agent.wait()
    for _ in range(100):
        if not os.path.exists(f"/proc/{child}"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"egress process {child} outlived its agent")
