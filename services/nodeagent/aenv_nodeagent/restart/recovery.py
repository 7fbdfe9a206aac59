"""Start-up recovery after a crash or restart of the node agent.

Paused sandboxes (a directory with `sandbox.json`: overlay and memory image, no process) are
kept; `restart/takeback.py` takes them over with the snapshots. A pause whose memory was still to
be written when the agent died has it written first, from its QEMU (memory/paused.py). A VM that
was running is re-adopted when its QEMU still runs in its slot, answers QMP, is not stopped half-
way through an operation, and the cluster still has its record on this node: QMP is reconnected
and its netns slot taken back (the lifecycle then reads its disk chain from QEMU), its cgroup
found again, and its egress policy enforced again: rewritten into its slot and, when it names hosts,
has header rules or a proxy, attached to this run's egress process (the last one died with the
last agent); its volume relay, when it mounts volumes, listens in its slot again. Everything
else is cleaned up: other QEMUs killed (template captures the agent died in too,
restart/builds.py), their slots, cgroups and directories removed, and the records of
sandboxes that did not survive marked lost, so clients get a clear answer and nothing leaks:
each dies (VMM_CRASH, a DIED event and its certificate, also on its record). One the scheduler
marked lost meanwhile and that is back (adopted, or paused on disk) has its certificate
withdrawn and is announced "back with its node" (sandbox/events.py).
Paused sandboxes that the cluster now records on another node (taken over while this one was
gone) are dropped."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_nodeagent.memory.paused import finish_pending
from aenv_nodeagent.network import NetSlot, NetworkManager
from aenv_nodeagent.restart.builds import end_abandoned_builds
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.model import PAUSED_MARKER
from aenv_nodeagent.sandbox.records import SandboxRecords, egress_policy
from aenv_nodeagent.vmm import QemuVm, VmJail
from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.process import qemu_owning
from aenv_nodeagent.volumes import VolumeRelays
from aenv_nodeagent.volumes.endpoint import NO_SNAPSTORE

log = logging.getLogger(__name__)

_PIDFILES = "sandboxes/*/vm/qemu.pid"  # where the QEMUs of an earlier run left their pidfiles
_ADOPTABLE = (cluster_pb2.SANDBOX_STATE_RUNNING, cluster_pb2.SANDBOX_STATE_LOST)
_LOST = cluster_pb2.SANDBOX_STATE_LOST
# What a sandbox whose VM a restarted node agent could not take back died of.
NOT_SURVIVED = cluster_pb2.DEATH_CAUSE_VMM_CRASH
NOT_SURVIVED_DETAIL = "its VM did not survive the node agent's restart"
# The event's detail when a sandbox marked lost is back.
BACK = "back with its node"


@dataclass
class Adopted:
    """A running sandbox taken over from an earlier run."""

    record: cluster_pb2.SandboxRecord
    directory: Path
    slot: NetSlot
    vm: QemuVm
    # Its record said lost (the scheduler's sweep, while this node was gone): it is back.
    revived: bool = False


@dataclass
class Recovered:
    paused: set[str]
    adopted: list[Adopted]


def kill_stale_qemus(state_dir: Path, spare: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL every QEMU of an earlier run (but the `spare` ones) still holding its pidfile."""
    killed: list[int] = []
    for pidfile in state_dir.glob(_PIDFILES):
        pid = qemu_owning(pidfile)
        if pid is not None and pid not in spare:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
    return killed


def finish_paused_memory(sandboxes_dir: Path) -> None:
    """Write the memory that pauses cut short left pending, while their QEMUs still run."""
    for marker in sandboxes_dir.glob(f"*/{PAUSED_MARKER}"):
        finish_pending(marker.parent, VmFiles.in_dir(marker.parent / "vm").pidfile)


def remove_unpaused_dirs(sandboxes_dir: Path, keep: frozenset[str] = frozenset()) -> set[str]:
    """Remove the directories of sandboxes that were running (but `keep`); return the paused
    sandboxes' ids."""
    paused: set[str] = set()
    if not sandboxes_dir.is_dir():
        return paused
    for directory in sandboxes_dir.iterdir():
        if directory.name in keep:
            continue
        if (directory / PAUSED_MARKER).is_file():
            shutil.rmtree(directory / "vm", ignore_errors=True)
            paused.add(directory.name)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return paused


async def adopt(
    directory: Path, record: cluster_pb2.SandboxRecord, network: NetworkManager,
    jail: VmJail | None = None,
) -> Adopted | None:
    """The sandbox in `directory` if its VM can be taken over, else None (it is then killed).
    Its cgroup is found again through `jail`, whose to remove it is when the VM ends."""
    try:
        vm = await QemuVm.attach(directory / "vm", jail=jail)
    except NotFound:
        return None
    except AenvError as err:
        _not_adopted(record, err)
        return None
    try:
        # Stopped means an operation (capture, reset) was cut short: its disk chain is unknown.
        if (status := await vm.status()) != "running":
            raise Conflict(f"its VM was left {status}")
        slot = network.adopt_slot_of(vm.pid)
        if slot is None:
            raise NotFound("its VM runs in none of this node's network slots")
    except AenvError as err:
        _not_adopted(record, err)
        await vm.release()
        return None
    revived = record.state == _LOST
    record.state = cluster_pb2.SANDBOX_STATE_RUNNING
    return Adopted(record, directory, slot, vm, revived)


async def restore_egress(adopted: list[Adopted], network: NetworkManager) -> None:
    """Each adopted sandbox's recorded policy, enforced again (a failure is logged: the slot
    keeps the rules the last run left, which redirect to no listener, so nothing leaks)."""
    for found in adopted:
        record = found.record
        try:
            await network.restore_policy(
                found.slot, egress_policy(record.network, record.owner_key_id))
        except AenvError as err:
            log.error("egress policy of an adopted sandbox not restored",
                      extra={"sandbox_id": record.sandbox_id, "error": err.message})


async def restore_relays(adopted: list[Adopted], relays: VolumeRelays | None) -> None:
    """Each adopted sandbox's volume relay, listening again in its slot (the last one died with
    the last agent; its guest's NFS client dials again). A failure is logged: that guest's
    volumes hang until it is killed, nothing else of it breaks."""
    for found in adopted:
        record = found.record
        if not record.volume_mounts:
            continue
        try:
            if relays is None:
                raise Conflict(NO_SNAPSTORE)
            await relays.resume(found.slot.netns, record.volume_mounts)
        except AenvError as err:
            log.error("volume relay of an adopted sandbox not restored",
                      extra={"sandbox_id": record.sandbox_id, "error": err.message})


def _not_adopted(record: cluster_pb2.SandboxRecord, err: AenvError) -> None:
    log.warning("running VM not re-adopted", extra={"sandbox_id": record.sandbox_id,
                                                    "error": err.message})


async def recover(
    node_id: str,
    state_dir: Path,
    network: NetworkManager,
    records: SandboxRecords,
    previous: list[cluster_pb2.SandboxRecord],
    jail: VmJail | None = None,
    templates_dir: Path | None = None,
    relays: VolumeRelays | None = None,
    events: SandboxEvents | None = None,
) -> Recovered:
    events = events or SandboxEvents.off(records, node_id)
    ours = [rec for rec in previous if rec.node_id == node_id]
    sandboxes_dir = state_dir / "sandboxes"
    adopted = [found for rec in ours if rec.state in _ADOPTABLE
               if (found := await adopt(sandboxes_dir / rec.sandbox_id, rec, network, jail))]
    await restore_egress(adopted, network)
    await restore_relays(adopted, relays)
    kept = frozenset(a.record.sandbox_id for a in adopted)
    await asyncio.to_thread(finish_paused_memory, sandboxes_dir)
    killed = kill_stale_qemus(state_dir, spare=frozenset(a.vm.pid for a in adopted))
    if templates_dir is not None:  # before their slots go: a capture's QEMU runs in one
        killed += end_abandoned_builds(templates_dir).killed
    removed = await network.destroy_orphans(keep={a.slot.netns for a in adopted})
    if jail is not None:
        jail.sweep()  # the killed QEMUs' cgroups (a frozen copy's stays until it is released)
    paused = remove_unpaused_dirs(sandboxes_dir, keep=kept)
    dropped = drop_paused_of_others(sandboxes_dir, paused, ours)
    paused -= dropped
    lost = [rec for rec in ours if rec.sandbox_id not in paused and rec.sandbox_id not in kept]
    for rec in lost:
        if rec.state != _LOST or not rec.HasField("death"):  # (the sweep certified it already)
            certificate = await events.died(rec, NOT_SURVIVED, NOT_SURVIVED_DETAIL)
            if certificate is not None:
                rec.death.CopyFrom(certificate)
        rec.state = _LOST
        await records.put_sandbox(rec)
    for rec in ours:
        # Swept as lost while this agent was down, or cut short between marker and record.
        if rec.sandbox_id in paused and rec.state != cluster_pb2.SANDBOX_STATE_PAUSED:
            revived = rec.state == _LOST
            rec.state = cluster_pb2.SANDBOX_STATE_PAUSED
            await events.publish(rec, cluster_pb2.SANDBOX_EVENT_TYPE_PAUSED,
                                 detail=BACK if revived else "", revived=revived)
    if killed or removed or lost or paused or adopted or dropped:
        log.warning(
            "recovered after an earlier run",
            extra={"qemu_killed": len(killed), "netns_removed": len(removed),
                   "sandboxes_lost": [rec.sandbox_id for rec in lost],
                   "sandboxes_paused_kept": sorted(paused), "sandboxes_adopted": sorted(kept),
                   "paused_dropped": sorted(dropped)},
        )
    return Recovered(paused, adopted)


def drop_paused_of_others(
    sandboxes_dir: Path, paused: set[str], ours: list[cluster_pb2.SandboxRecord]
) -> set[str]:
    """Remove the paused sandboxes the cluster no longer records on this node: another node took
    them over (snapshots/paused_claims.py) while this one was gone, or they were killed there. No
    API could reach these copies any more."""
    dropped = paused - {rec.sandbox_id for rec in ours}
    for sandbox_id in dropped:
        shutil.rmtree(sandboxes_dir / sandbox_id, ignore_errors=True)
    return dropped
