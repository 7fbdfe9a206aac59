"""Start-up clean-up after a crash or restart of the node agent.

Paused sandboxes (a directory with `sandbox.json`: overlay + state file, no process) are kept;
`SandboxLifecycle.load` takes them over with the snapshots. VMs that were running are not
re-adopted: their QEMU is killed, their network slot and
directory removed, and their records marked lost, so clients get a clear answer and nothing
leaks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.sandboxes import SandboxRecords

log = logging.getLogger(__name__)

PAUSED_MARKER = "sandbox.json"


_PIDFILES = "sandboxes/*/vm/qemu.pid"  # where the QEMUs of an earlier run left their pidfiles


def kill_stale_qemus(state_dir: Path) -> list[int]:
    """SIGKILL every QEMU of an earlier run whose pidfile names a live QEMU process."""
    killed: list[int] = []
    for pidfile in state_dir.glob(_PIDFILES):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            # The pid may have been reused: only a QEMU that uses this directory is ours.
            if b"qemu-system" in cmdline and str(pidfile.parent).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def remove_unpaused_dirs(sandboxes_dir: Path) -> set[str]:
    """Remove the directories of sandboxes that were running; return the paused sandboxes' ids."""
    paused: set[str] = set()
    if not sandboxes_dir.is_dir():
        return paused
    for directory in sandboxes_dir.iterdir():
        if (directory / PAUSED_MARKER).is_file():
            shutil.rmtree(directory / "vm", ignore_errors=True)
            paused.add(directory.name)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return paused


async def recover(
    node_id: str,
    state_dir: Path,
    network: NetworkManager,
    records: SandboxRecords,
    previous: list[cluster_pb2.SandboxRecord],
) -> set[str]:
    """Returns the ids of the paused sandboxes kept."""
    killed = kill_stale_qemus(state_dir)
    removed = await network.destroy_orphans(keep=set())
    paused = remove_unpaused_dirs(state_dir / "sandboxes")
    lost = [rec for rec in previous if rec.node_id == node_id and rec.sandbox_id not in paused]
    for rec in lost:
        rec.state = cluster_pb2.SANDBOX_STATE_LOST
        await records.put_sandbox(rec)
    if killed or removed or lost or paused:
        log.warning(
            "recovered after an earlier run",
            extra={"qemu_killed": len(killed), "netns_removed": len(removed),
                   "sandboxes_lost": [rec.sandbox_id for rec in lost],
                   "sandboxes_paused_kept": sorted(paused)},
        )
    return paused
