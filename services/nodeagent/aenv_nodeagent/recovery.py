"""Start-up clean-up after a crash or kill: QEMU processes, network slots and sandbox directories
left by an earlier run of this node agent are removed, and their records marked lost.

(Re-adopting running VMs instead is the job of a later step; until then nothing may leak.)
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


def kill_stale_qemus(sandboxes_dir: Path) -> list[int]:
    """SIGKILL the QEMU of every sandbox directory whose pidfile names a live QEMU process."""
    killed: list[int] = []
    for pidfile in sandboxes_dir.glob("*/vm/qemu.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            # The pid may have been reused: only a QEMU that uses this directory is ours.
            if b"qemu-system" in cmdline and str(pidfile.parent).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


async def recover(
    node_id: str,
    sandboxes_dir: Path,
    network: NetworkManager,
    records: SandboxRecords,
    previous: list[cluster_pb2.SandboxRecord],
) -> None:
    killed = kill_stale_qemus(sandboxes_dir)
    removed = await network.destroy_orphans(keep=set())
    shutil.rmtree(sandboxes_dir, ignore_errors=True)
    lost = [rec for rec in previous if rec.node_id == node_id]
    for rec in lost:
        rec.state = cluster_pb2.SANDBOX_STATE_LOST
        await records.put_sandbox(rec)
    if killed or removed or lost:
        log.warning(
            "cleaned up after an earlier run",
            extra={"qemu_killed": len(killed), "netns_removed": len(removed),
                   "sandboxes_lost": [rec.sandbox_id for rec in lost]},
        )
