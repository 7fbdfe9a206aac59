"""This node's sandboxes: the wing's operations built over one context (sandbox/context.py), so a
reader sees the whole wing here, and its start and stop in the order they need. The gRPC edge
(servicer.py) calls the operations themselves; docs/architecture.md draws the same map."""

from __future__ import annotations

import functools

from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.restart.recovery import NOT_SURVIVED, NOT_SURVIVED_DETAIL
from aenv_nodeagent.restart.takeback import TakeBack
from aenv_nodeagent.sandbox.changes import Changes
from aenv_nodeagent.sandbox.console import SandboxLogs
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.create import Creates
from aenv_nodeagent.sandbox.fork import Forks
from aenv_nodeagent.sandbox.guest_metrics import GuestMetrics
from aenv_nodeagent.sandbox.kill import Kills
from aenv_nodeagent.sandbox.liveness import Liveness, LivenessSettings
from aenv_nodeagent.sandbox.pause import Pauses
from aenv_nodeagent.sandbox.paused_transfer import PausedTransfer
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.restore import Restorer
from aenv_nodeagent.sandbox.snapshot import Snapshots
from aenv_nodeagent.sandbox.watch import VmExits
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.vmm.driver import VmmDriver
from aenv_nodeagent.volumes import VolumeRelays


class SandboxWing:
    """Create, pause/resume, snapshot, fork/reset, kill and inspect this node's sandboxes: one
    attribute per operation class."""

    def __init__(
        self, context: WingContext, driver: VmmDriver, *, pool: WarmPool | None = None,
        relays: VolumeRelays | None = None, publisher: SnapshotPublisher | None = None,
        commands: GuestCommands | None = None,
    ) -> None:
        """`commands` runs the warm-up of the pool's woken guests (None: none are woken)."""
        self.context = context
        restorer = Restorer(context, driver, pool=pool, relays=relays, commands=commands)
        self.transfers = PausedTransfer(context)
        self.pauses = Pauses(context, restorer, self.transfers)
        self.snapshots = Snapshots(context, publisher)
        self.creates = Creates(context, restorer)
        self.forks = Forks(context, self.snapshots, self.creates, restorer)
        self.guest_metrics = GuestMetrics(context)
        self.logs = SandboxLogs(context)
        self.kills = Kills(context, self.pauses, self.guest_metrics.history)
        self.changes = Changes(context, self.kills)
        self.exits = VmExits(context.registry, self.kills.kill, context.cut_traffic,
                             self.logs.tail)
        self.takeback = TakeBack(
            context, self.snapshots, self.transfers,
            functools.partial(self.kills.kill, cause=NOT_SURVIVED, detail=NOT_SURVIVED_DETAIL))

    @property
    def registry(self) -> SandboxRegistry:
        return self.context.registry

    def templates_in_use(self) -> set[str]:
        """Templates this node's sandboxes (running, paused, being made) and snapshots stand
        on: the template cache keeps them."""
        return self.registry.templates_in_use() | self.context.snapshot_store.templates_in_use()

    def liveness(self, settings: LivenessSettings) -> Liveness:
        """Ends the sandboxes whose guest stopped answering (sandbox/liveness.py)."""
        return Liveness(self.registry, self.context.envd.answers, self.kills.kill, settings)

    async def stop(self) -> None:
        """Kill the running sandboxes; paused ones and snapshots stay on disk for the next start.
        Background image builds finish (they hold frozen guests), pushes end."""
        ctx = self.context
        await ctx.memory_images.close()
        if ctx.persistence is not None:
            await ctx.persistence.close()
        await self.kills.kill_running()
        await ctx.disk.close()
        await self.pauses.settled()
        await ctx.events.close()

    async def destroy_all(self) -> None:
        """Everything on this node: running and paused sandboxes, snapshots, layers."""
        ctx = self.context
        await ctx.memory_images.close()
        await ctx.disk.close()
        await self.kills.kill_running()
        await self.kills.kill_paused()
        for meta in list(ctx.snapshot_store.listed()):
            ctx.snapshot_store.remove(meta.snapshot_id)
        ctx.disk.collect()
        await self.pauses.settled()
        await ctx.network.settled()
        if ctx.persistence is not None:  # last: the kills' deletes from snapstore finish
            await ctx.persistence.close()
        await ctx.events.close()
