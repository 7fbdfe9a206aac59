"""`python -m aenv_nodeagent cleanup`: what a stopping node agent does to its node, done for one
that cannot do it any more (it died and is not started again, or ignored SIGTERM).

Its QEMUs run in sessions of their own, so they outlive it: every QEMU of its state directory and
every process in one of its network slots (sandboxes, the warm pool, template builds) is killed,
with the QEMUs of template captures it died in (their `.build-*` folders removed), the slots
and the root netns's forwarding table of their pool removed, the running sandboxes' directories
and records deleted, as the kills at a clean stop delete them, and the VMs' cgroups with the
node's slices. Paused sandboxes stay for the next
start, a pause cut short first getting its memory written (as a restart's recovery does)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from aenv_common.cluster import ClusterStore
from aenv_common.errors import AenvError
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.confinement import LimitSettings, choose
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.network.host_nat import HostNat
from aenv_nodeagent.restart.builds import end_abandoned_builds
from aenv_nodeagent.restart.recovery import (
    finish_paused_memory,
    kill_stale_qemus,
    remove_unpaused_dirs,
)

log = logging.getLogger(__name__)

# Killed processes are reaped by whoever inherited them: a netns is removed once they are gone.
EXIT_WAIT_S = 5.0
# etcd may be gone too; the next start's recovery then marks the records lost instead.
RECORDS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Cleaned:
    killed: list[int]
    netns_removed: list[str]
    records_deleted: list[str]


async def clean_up(settings: NodeAgentSettings) -> Cleaned:
    state_dir = settings.resolved_state_dir()
    network = NetworkManager(NetworkConfig(prefix=settings.net_prefix,
                                           pool_cidr=settings.net_pool_cidr))
    sandboxes_dir = state_dir / "sandboxes"
    await asyncio.to_thread(finish_paused_memory, sandboxes_dir)
    captures = await asyncio.to_thread(end_abandoned_builds, settings.resolved_templates_dir())
    killed = (kill_stale_qemus(state_dir) + captures.killed
              + _kill(network.processes_in_slots()))
    await _until_gone(killed, EXIT_WAIT_S)
    removed = await network.destroy_orphans(keep=set())
    await HostNat.of(network.config, ()).remove()
    _remove_cgroups(settings)
    paused = await asyncio.to_thread(remove_unpaused_dirs, sandboxes_dir)
    try:
        deleted = await asyncio.wait_for(
            _delete_running_records(settings, paused), RECORDS_TIMEOUT_S)
    except Exception as err:  # etcd down or slow: reported, the next start marks them lost
        log.warning("sandbox records not deleted", extra={"error": repr(err)})
        deleted = []
    cleaned = Cleaned(sorted(set(killed)), removed, deleted)
    log.warning("cleaned up after the node agent", extra={
        "state_dir": str(state_dir), "qemu_killed": len(cleaned.killed),
        "netns_removed": len(removed), "records_deleted": deleted,
        "paused_kept": sorted(paused)})
    return cleaned


async def _delete_running_records(settings: NodeAgentSettings, paused: set[str]) -> list[str]:
    store = await ClusterStore.connect(settings.common)
    try:
        gone = [rec.sandbox_id for rec in await store.list_sandboxes()
                if rec.node_id == settings.node_id and rec.sandbox_id not in paused]
        for sandbox_id in gone:
            await store.delete_sandbox(sandbox_id)
        return gone
    finally:
        await store.close()


def _remove_cgroups(settings: NodeAgentSettings) -> None:
    """The node's VM cgroups, now empty, and its slices (a frozen copy's stays: the next start
    sweeps it)."""
    if settings.vmm_cgroups == "off":
        return
    try:
        confinement = choose("auto", settings.resolved_state_dir(), LimitSettings(),
                             settings.vmm_cgroup_parent)
    except AenvError as err:
        log.warning("VM cgroups not removed", extra={"error": err.message})
        return
    if confinement.cgroups is not None:
        confinement.cgroups.close()


def _kill(pids: list[int]) -> list[int]:
    killed = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


async def _until_gone(pids: list[int], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    # Polls processes the kernel ends: there is no event to wait on.
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
