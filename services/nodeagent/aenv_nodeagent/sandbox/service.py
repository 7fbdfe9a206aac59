"""This node's sandboxes, by id: every operation the node agent's API offers on them, each handed
to the module whose job it is. Its parts are built from its collaborators in one place, so a reader
sees the whole wing in its constructor; docs/architecture.md draws the same map."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument, NotFound, Unavailable
from aenv_common.limits import MAX_TIMEOUT_S
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.memory.capture import CaptureLedger
from aenv_nodeagent.memory.images import MemoryImage, MemoryImages
from aenv_nodeagent.metrics import (
    ALL_TIME,
    DEFAULT_MAX_SAMPLES,
    SAMPLE_ERRORS,
    MetricSample,
    MetricsHistory,
    Window,
)
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.restart.recovery import BACK, NOT_SURVIVED, NOT_SURVIVED_DETAIL, Adopted
from aenv_nodeagent.restart.takeback import TakeBack
from aenv_nodeagent.sandbox.background import SandboxTasks
from aenv_nodeagent.sandbox.create import Creates
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.fork import Forks
from aenv_nodeagent.sandbox.handover import Handover
from aenv_nodeagent.sandbox.kill import OWNER_KILL, Kills
from aenv_nodeagent.sandbox.layers import DiskLayers
from aenv_nodeagent.sandbox.liveness import Liveness, LivenessSettings
from aenv_nodeagent.sandbox.logs import CONSOLE_LOG, ConsoleLogs, LogEntry, LogQuery
from aenv_nodeagent.sandbox.model import FULL, Paused, Sandbox
from aenv_nodeagent.sandbox.pause import Pauses
from aenv_nodeagent.sandbox.records import ClusterRecords, egress_policy, timestamp
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.restore import Restorer, RestoreTimeouts
from aenv_nodeagent.sandbox.snapshot import Snapshots
from aenv_nodeagent.sandbox.sources import RestoreSources
from aenv_nodeagent.sandbox.watch import VmExits
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.snapshots.store import LayerStore, SnapshotMeta, SnapshotStore
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.vmm.driver import VmmDriver
from aenv_nodeagent.volumes import VolumeRelays

log = logging.getLogger(__name__)
# How much of a guest's console its death is read from.
CONSOLE_TAIL_LINES = 400

UPDATED = cluster_pb2.SANDBOX_EVENT_TYPE_UPDATED


@dataclass(frozen=True)
class SandboxSettings:
    """The wing's own knobs (from NodeAgentSettings)."""

    state_dir: Path
    ready_timeout_s: float
    boot_timeout_s: float = 120.0
    max_layers: int = 8
    persist_paused: bool = True
    metrics_max_samples: int = DEFAULT_MAX_SAMPLES


async def _nothing(_: str = "") -> None:
    return None


class SandboxService:
    """Create, pause/resume, snapshot, fork/reset, kill and inspect this node's sandboxes."""

    def __init__(
        self, settings: SandboxSettings, registry: SandboxRegistry, templates: TemplateStore,
        network: NetworkManager, envd: EnvdClient, records: ClusterRecords, driver: VmmDriver,
        *, pool: WarmPool | None = None, persistence: SnapshotPersistence | None = None,
        publisher: SnapshotPublisher | None = None,
        cut_traffic: Callable[[str], Awaitable[None]] = _nothing,
        allocation_changed: Callable[[], Awaitable[None]] = _nothing,
        relays: VolumeRelays | None = None, events: SandboxEvents | None = None,
    ) -> None:
        self.registry = registry
        # Announces every state change (sandbox/events.py); off unless the node gives one.
        self.events = events = events or SandboxEvents.off(records, registry.node_id)
        self.persistence = persistence
        self.metrics_history = MetricsHistory(settings.metrics_max_samples)
        self.console_logs = ConsoleLogs()
        self.memory_images = MemoryImages()
        self._envd = envd
        self._network = network
        self._records = records
        self._on_allocation = allocation_changed
        sandboxes_dir = settings.state_dir / "sandboxes"
        self.snapshots = SnapshotStore(settings.state_dir / "snapshots")
        self.layers = LayerStore(settings.state_dir / "layers")
        ledger, quits = CaptureLedger(), SandboxTasks()
        self._disk = DiskLayers(registry, self.layers, self.snapshots, templates,
                                max_layers=settings.max_layers)
        sources = RestoreSources(registry.node_id, sandboxes_dir, templates, self.layers,
                                 self.memory_images)
        restorer = Restorer(
            registry, templates, network, envd, records, driver, self._allocation_changed,
            RestoreTimeouts(settings.ready_timeout_s, settings.boot_timeout_s), pool, relays,
            events)
        self._handover = Handover(
            registry, records, templates, self.snapshots, self._disk, sources, quits,
            sandboxes_dir, persistence, events, persist_paused=settings.persist_paused)
        self._pauses = Pauses(
            registry, restorer, sources, self._disk, self._handover, self.memory_images, ledger,
            network, envd, records, cut_traffic, self._allocation_changed, quits, events,
            ready_timeout_s=settings.ready_timeout_s)
        self._snapshots = Snapshots(
            registry, templates, self.snapshots, self._disk, self.memory_images, ledger, sources,
            envd, ready_timeout_s=settings.ready_timeout_s, persistence=persistence,
            publisher=publisher)
        self._creates = Creates(registry, templates, self.snapshots, self.layers, restorer,
                                sources, events, persistence)
        self._forks = Forks(registry, self._snapshots, self._creates, restorer, sources,
                            self._disk, network, records, cut_traffic, events)
        self._kills = Kills(registry, self._pauses, self._disk, network, records,
                            self.metrics_history, cut_traffic, self._allocation_changed, events)
        self._exits = VmExits(registry, self._kills.kill, cut_traffic, self._console_tail)
        self._takeback = TakeBack(registry, templates, self._disk, self._snapshots,
                                  self._handover, self.memory_images, records, sandboxes_dir,
                                  functools.partial(self._kills.kill, cause=NOT_SURVIVED,
                                                    detail=NOT_SURVIVED_DETAIL), events)

    # --- queries -------------------------------------------------------------------------------

    def get(self, sandbox_id: str) -> Sandbox:
        """:raise NotFound: no such running sandbox."""
        return self.registry.get(sandbox_id)

    def all(self) -> list[Sandbox]:
        return self.registry.all()

    def serving(self, sandbox_id: str) -> Sandbox | None:
        return self.registry.serving(sandbox_id)

    def record(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        """:raise NotFound: no such sandbox, running or paused."""
        return self.registry.record(sandbox_id)

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        return self.registry.records()

    def templates_in_use(self) -> set[str]:
        """Templates this node's sandboxes (running, paused, being made) and snapshots stand
        on: the template cache keeps them."""
        return self.registry.templates_in_use() | self.snapshots.templates_in_use()

    def paused_ids(self) -> list[str]:
        return self.registry.paused_ids()

    @property
    def max_layers(self) -> int:
        return self._disk.max_layers

    @max_layers.setter
    def max_layers(self, value: int) -> None:
        self._disk.max_layers = value

    # --- operations (each documented, with what it raises, where it is done) -------------------

    async def create(self, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        return await self._creates.create(spec)

    async def kill(
        self, sandbox_id: str, *, cause: cluster_pb2.DeathCause = OWNER_KILL, detail: str = "",
    ) -> None:
        await self._kills.kill(sandbox_id, cause=cause, detail=detail)

    async def pause(
        self, sandbox_id: str, mode: cluster_pb2.PauseMode = FULL, *,
        require_healthy_guest: bool = False, detail: str = "",
    ) -> cluster_pb2.SandboxRecord:
        return await self._pauses.pause(
            sandbox_id, mode, require_healthy_guest=require_healthy_guest, detail=detail)

    async def resume(self, sandbox_id: str, timeout_s: int = 0, *, reboot: bool = False) -> Sandbox:
        return await self._pauses.resume(sandbox_id, timeout_s, reboot=reboot)

    async def take_over(self, sandbox_id: str, *, discard: bool = False) -> Paused | None:
        return await self._handover.take_over(sandbox_id, discard=discard)

    async def create_snapshot(
        self, sandbox_id: str, name: str = "", *, hidden: bool = False,
        filesystem_only: bool = False,
    ) -> SnapshotMeta:
        meta = await self._snapshots.create(sandbox_id, name, hidden=hidden,
                                            filesystem_only=filesystem_only)
        if not hidden and (sandbox := self.registry.find(sandbox_id)) is not None:
            await self.events.announce(sandbox, cluster_pb2.SANDBOX_EVENT_TYPE_SNAPSHOTTED,
                                       detail=f"snapshot {meta.snapshot_id}")
        return meta

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._snapshots.delete(snapshot_id)

    async def memory_image(self, snapshot_id: str) -> MemoryImage:
        return await self._snapshots.memory_image(snapshot_id)

    async def fork(
        self, sandbox_id: str, count: int, timeout_s: int = 0,
        child_ids: Sequence[str] = (), child_tokens: Sequence[str] = (),
        child_mounts: Sequence[Sequence[cluster_pb2.VolumeMount]] = (),
    ) -> list[nodeagent_pb2.ForkResult]:
        return await self._forks.fork(sandbox_id, count, timeout_s, child_ids, child_tokens,
                                      child_mounts)

    async def reset(self, sandbox_id: str, snapshot_id: str) -> cluster_pb2.SandboxRecord:
        return await self._forks.reset(sandbox_id, snapshot_id)

    async def compacted(self, sandbox_id: str) -> None:
        await self._disk.compacted(sandbox_id)

    async def set_timeout(
        self, sandbox_id: str, timeout_s: int, *, extend_only: bool = False
    ) -> cluster_pb2.SandboxRecord:
        """The sandbox ends `timeout_s` from now; 0 ends it now, its timeout action (kill, or
        pause) run at once (kill.py `expire_now`). `extend_only` never shortens it.

        :raise InvalidArgument: out of range. :raise NotFound: no such running sandbox.
        """
        if not 0 <= timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"timeout must be between 0 and {MAX_TIMEOUT_S} seconds")
        sandbox = self.registry.get(sandbox_id)
        end = time.time() + timeout_s
        if extend_only and end <= sandbox.record.end_at.ToNanoseconds() / 1e9:
            return sandbox.record
        if timeout_s == 0:
            return await self._kills.expire_now(sandbox)
        sandbox.record.end_at.CopyFrom(timestamp(end))
        await self.events.publish(sandbox.record, UPDATED, detail=f"timeout {timeout_s} s")
        return sandbox.record

    async def update_network(
        self, sandbox_id: str, network: cluster_pb2.NetworkPolicy
    ) -> cluster_pb2.SandboxRecord:
        """New egress rules for a running sandbox; how its ports are reached stays. All or
        nothing: the policy is validated whole before the slot changes, and a record that cannot
        be stored puts the old rules back, so the old policy stays applied and recorded.

        :raise InvalidArgument: an entry of the new policy. :raise NotFound: no such sandbox.
        """
        sandbox = self.registry.get(sandbox_id)
        current = sandbox.record.network
        updated = cluster_pb2.NetworkPolicy()
        updated.CopyFrom(network)
        updated.private_traffic = current.private_traffic
        updated.mask_request_host = current.mask_request_host
        updated.https_ports[:] = current.https_ports
        owner = sandbox.record.owner_key_id
        policy, previous = egress_policy(updated, owner), egress_policy(current, owner)
        await self._network.update_policy(sandbox.slot, policy)
        record = cluster_pb2.SandboxRecord()
        record.CopyFrom(sandbox.record)
        record.network.CopyFrom(updated)
        try:
            await self.events.publish(record, UPDATED, detail="network updated")
        except BaseException:
            await self._network.update_policy(sandbox.slot, previous)
            raise
        sandbox.record.network.CopyFrom(updated)
        return sandbox.record

    async def kill_expired(self, now: float | None = None) -> list[str]:
        return await self._kills.expire_due(now)

    async def run_expiry(self, interval_s: float = 1.0) -> None:
        await self._kills.run_expiry(interval_s)

    async def run_exit_watch(self) -> None:
        """End the sandboxes whose VM ends on its own, each with its cause (sandbox/watch.py)."""
        await self._exits.run()

    async def run_liveness(self, settings: LivenessSettings) -> None:
        """End the sandboxes whose guest stopped answering (sandbox/liveness.py)."""
        await Liveness(self.registry, self._envd.answers, self._kills.kill, settings).run()

    # --- guest metrics -------------------------------------------------------------------------

    def sampling_targets(self) -> list[str]:
        return self.registry.sampling_targets()

    def is_running(self, sandbox_id: str) -> bool:
        return self.registry.is_running(sandbox_id)

    async def sample(self, sandbox_id: str) -> MetricSample:
        """One live sample of envd's figures.

        :raise Unavailable: the guest does not answer.
        """
        sandbox = self.registry.get(sandbox_id)
        try:
            data = await self._envd.metrics(sandbox.host, sandbox.record.envd_access_token)
            return MetricSample.from_envd(data, time.time())
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise Unavailable(f"envd of \"{sandbox_id}\" did not answer: {err!r}") from err

    async def metrics(self, sandbox_id: str, window: Window = ALL_TIME) -> list[MetricSample]:
        """The kept samples in the window, oldest first. A running sandbox not sampled yet gets
        one live sample, so a fresh sandbox answers too; a paused one, what was sampled before
        its pause."""
        record = self.registry.record(sandbox_id)  # NotFound for unknown ids
        history = self.metrics_history
        paused = record.state == cluster_pb2.SANDBOX_STATE_PAUSED
        if not paused and not history.has(sandbox_id) and not self.registry.is_busy(sandbox_id):
            history.add(sandbox_id, await self.sample(sandbox_id))
        return history.window(sandbox_id, window)

    async def latest_metric(self, sandbox_id: str) -> MetricSample | None:
        """The newest sample (a live one when there is none yet); None when the guest does not
        answer or an operation holds the sandbox. Paused ones keep their newest sample."""
        try:
            await self.metrics(sandbox_id)
        except NotFound:
            pass  # unknown
        except SAMPLE_ERRORS as err:
            log.debug("live metrics sample failed",
                      extra={"sandbox_id": sandbox_id, "error": repr(err)})
        return self.metrics_history.latest(sandbox_id)

    # --- guest logs ----------------------------------------------------------------------------

    def logs(self, sandbox_id: str, query: LogQuery) -> list[LogEntry]:
        """The sandbox's console lines in the query's window, read up to now (sandbox/logs.py).

        :raise NotFound: no such sandbox, running or paused.
        """
        paused = self.registry.paused(sandbox_id)
        directory = paused.directory if paused else self.registry.get(sandbox_id).directory
        self.console_logs.collect(sandbox_id, directory / CONSOLE_LOG)
        return self.console_logs.query(sandbox_id, query)

    async def run_log_collection(self, interval_s: float = 0.5) -> None:
        await self.console_logs.run(self._consoles, self._keeps_logs, interval_s)

    def _console_tail(self, sandbox: Sandbox) -> list[str]:
        """The last lines of the guest's console, read up to now, oldest first: what tells why
        a guest ended itself (sandbox/death_causes.py)."""
        self.console_logs.collect(sandbox.sandbox_id, sandbox.directory / CONSOLE_LOG)
        entries = self.console_logs.query(
            sandbox.sandbox_id, LogQuery(limit=CONSOLE_TAIL_LINES, backward=True))
        return [entry.line for entry in reversed(entries)]

    def _consoles(self) -> list[tuple[str, Path]]:
        return [(sbx.sandbox_id, sbx.directory / CONSOLE_LOG) for sbx in self.registry.all()] + [
            (p.record.sandbox_id, p.directory / CONSOLE_LOG) for p in self.registry.all_paused()]

    def _keeps_logs(self, sandbox_id: str) -> bool:
        return self.registry.has(sandbox_id) or self.registry.is_busy(sandbox_id)

    # --- start and stop ------------------------------------------------------------------------

    async def adopt(self, adopted: Sequence[Adopted]) -> None:
        await self._takeback.adopt(adopted)

    async def republish_running(self) -> None:
        """Writes the records of the running sandboxes again. Call once the node is registered:
        until its lease stands, the leading scheduler's sweep may mark an adopted sandbox lost
        after `adopt` wrote its record: one marked lost so is back (its certificate withdrawn,
        READY "back with its node")."""
        for sandbox in self.registry.all():
            current = await self._records.get_sandbox(sandbox.sandbox_id)
            if current is not None and current.state == cluster_pb2.SANDBOX_STATE_LOST:
                await self.events.publish(sandbox.record, cluster_pb2.SANDBOX_EVENT_TYPE_READY,
                                          detail=BACK, revived=True)
            else:
                await self._records.put_sandbox(sandbox.record)

    def load(self) -> list[str]:
        return self._takeback.load()

    async def settled(self) -> None:
        """Wait for the VMs of paused sandboxes to have quit."""
        await self._pauses.settled()

    async def stop(self) -> None:
        """Kill the running sandboxes; paused ones and snapshots stay on disk for the next start.
        Background image builds finish (they hold frozen guests), pushes end."""
        await self.memory_images.close()
        if self.persistence is not None:
            await self.persistence.close()
        await self._kills.kill_running()
        await self._disk.close()
        await self.settled()
        await self.events.close()

    async def destroy_all(self) -> None:
        """Everything on this node: running and paused sandboxes, snapshots, layers."""
        await self.memory_images.close()
        await self._disk.close()
        await self._kills.kill_running()
        await self._kills.kill_paused()
        for meta in list(self.snapshots.listed()):
            self.snapshots.remove(meta.snapshot_id)
        self._disk.collect()
        await self.settled()
        await self._network.settled()
        if self.persistence is not None:  # last: the kills' deletes from snapstore finish
            await self.persistence.close()
        await self.events.close()

    async def _allocation_changed(self) -> None:
        try:
            await self._on_allocation()
        except Unavailable:
            pass  # not registered yet: registration publishes the allocation
        except Exception:
            # The periodic heartbeat publishes it again shortly.
            log.warning("publishing the node record failed", exc_info=True)
