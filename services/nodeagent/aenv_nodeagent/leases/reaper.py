"""Ends this node's sandboxes whose experiment lease lapsed (docs/leases.md).

A lease is a key in etcd bound to an etcd lease its holder renews; the key vanishing is the lapse
(aenv_common.leases). Two paths find the sandboxes to end, and either alone would do:
- the watch of `leases/` (a RecordCache): a key deleted (expired, released) ends the sandboxes
  under it at once; it also remembers each live lease's `on_expiry`, which the deleted key no
  longer says (each sandbox's record keeps it too, `lease_on_expiry`, read at its create);
- the reconcile, every `interval_s`: this node's sandboxes are read first, then the leases in
  etcd; a sandbox whose lease is not among them lapsed (its create was admitted only while its
  lease existed), which catches what the watch missed (an agent that was down, a compaction).

Ending is the lease's action, as the watch saw it, else as the sandbox's record says: KILL (and
an unknown action: a sandbox made before records kept it, its lease seen by no watch or read)
kills running and paused sandboxes with cause LEASE_EXPIRED (a DIED event and a
certificate); PAUSE pauses running ones (a PAUSED event, "lease <id> lapsed") and then detaches
every paused one from the lapsed lease, so that its owner may resume it without the reconcile
pausing it again.
Sandboxes are ended concurrently, at most `concurrency` at once; one that another operation
holds, or whose end failed, is ended by a later reconcile.

The reconcile also ends the paused sandboxes whose node is gone (kept in snapstore), when this
node is their keeper (orphans.py): no node agent holds them, so no watch sees them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from opentelemetry import trace

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore, RecordCache, Versioned
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_common.leases import LEASES, PAUSE, expiry_action
from aenv_common.rollout import sandbox_span

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

LeaseRecord = cluster_pb2.LeaseRecord
LEASE_EXPIRED = cluster_pb2.DEATH_CAUSE_LEASE_EXPIRED
FULL_PAUSE = cluster_pb2.PAUSE_MODE_UNSPECIFIED
RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED
Orphan = Versioned[cluster_pb2.SandboxRecord]


class OrphanKeeper(Protocol):
    """The cluster's paused sandboxes whose node is gone (orphans.py)."""

    async def leased(self) -> list[Versioned[cluster_pb2.SandboxRecord]]:
        """Those under a lease, when this node keeps them (none otherwise)."""
        ...

    async def kill(self, orphan: Versioned[cluster_pb2.SandboxRecord], *,
                   cause: cluster_pb2.DeathCause, detail: str) -> None: ...

    async def detach(self, orphan: Versioned[cluster_pb2.SandboxRecord], lease_id: str) -> None:
        ...


class LeasedSandboxes(Protocol):
    """What the reaper needs of this node's sandboxes (the wing, through leases/wing.py)."""

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        """Running and paused."""
        ...

    async def kill(self, sandbox_id: str, *, cause: cluster_pb2.DeathCause, detail: str) -> None:
        ...

    async def pause(self, sandbox_id: str, *, detail: str) -> None: ...

    async def detach(self, sandbox_id: str, lease_id: str) -> None:
        """A paused sandbox no longer names `lease_id` (its record, kept and published)."""
        ...

    @property
    def orphans(self) -> OrphanKeeper | None:
        """Who ends the paused sandboxes of gone nodes (None: this node does not)."""
        ...


def own_action(record: cluster_pb2.SandboxRecord) -> int:
    """The lapse's action the sandbox's record kept from its create (KILL when it kept none)."""
    return expiry_action(record.lease_on_expiry)


def _name(action: int | None) -> str:
    if action is None:
        return "each sandbox's own"
    return "pause" if action == PAUSE else "kill"


def detail(lease_id: str) -> str:
    return f"lease {lease_id} lapsed"


def decide(record: cluster_pb2.SandboxRecord, action: int) -> str | None:
    """What a lapsed lease's `action` does to one of its sandboxes: "kill", "pause" (a running
    one under a PAUSE lease), "detach" (a paused one under a PAUSE lease), or None (a sandbox
    in no state to end: it is being made or ended, a later pass sees it)."""
    if record.state not in (RUNNING, PAUSED):
        return None
    if action == PAUSE:
        return "pause" if record.state == RUNNING else "detach"
    return "kill"


class LeaseReaper:
    def __init__(
        self, store: ClusterStore, sandboxes: LeasedSandboxes, *, interval_s: float,
        concurrency: int,
    ) -> None:
        self._store = store
        self._sandboxes = sandboxes
        self._interval_s = interval_s
        self._bound = asyncio.Semaphore(concurrency)
        self._leases: RecordCache[LeaseRecord] = RecordCache(store, LEASES, LeaseRecord)
        self._leases.add_listener(self._changed)
        # Each lease's action as last seen alive; and the action of those seen lapse (None:
        # unseen alive, each sandbox's record says it).
        self._actions: dict[str, int] = {}
        self._lapsed: dict[str, int | None] = {}
        self._ending: set[str] = set()  # sandbox ids being ended now
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self.reaped = 0  # sandboxes ended (tests, logs)

    async def start(self) -> None:
        """Watches `leases/` (Unavailable when etcd is down) and reconciles every interval,
        the first time now: what lapsed while the agent was down ends first."""
        await self._leases.start()
        await self.reconcile()
        self._loop = asyncio.create_task(self._run(), name="lease-reconcile")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        await self._leases.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def reconcile(self) -> list[str]:
        """Ends every sandbox of this node whose lease is gone; their ids."""
        leased: list[tuple[cluster_pb2.SandboxRecord, Orphan | None]] = [
            (r, None) for r in self._sandboxes.records() if r.lease_id]
        keeper = self._sandboxes.orphans
        if keeper is not None:
            leased += [(o.record, o) for o in await keeper.leased()]
        if not leased:
            self._lapsed.clear()
            return []
        _, live = await self._store.snapshot(LEASES, LeaseRecord)
        for lease_id, entry in live.items():
            self._actions[lease_id] = expiry_action(entry.record.on_expiry)
        lapsed = {r.lease_id for r, _ in leased} - live.keys()
        # Forget what no sandbox here names any more (the actions of live leases stay).
        self._lapsed = {i: a for i, a in self._lapsed.items() if i in lapsed}
        ended: list[str] = []
        for record, orphan in leased:
            if record.lease_id in lapsed and record.sandbox_id not in self._ending:
                action = self._lapsed.setdefault(
                    record.lease_id, self._actions.pop(record.lease_id, None))
                ended.append(record.sandbox_id)
                self._spawn(record, action, orphan)
        if ended:
            log.info("leases lapsed", extra={"leases": sorted(lapsed), "sandboxes": len(ended)})
        await self.settled()
        return ended

    async def settled(self) -> None:
        """Until the ends started so far are done (tests; a reconcile waits for its own)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _changed(self, lease_id: str, entry: Versioned[LeaseRecord] | None) -> None:
        if entry is not None:
            self._actions[lease_id] = expiry_action(entry.record.on_expiry)
            return
        action = self._actions.pop(lease_id, None)
        self._lapsed[lease_id] = action
        under = [r for r in self._sandboxes.records()
                 if r.lease_id == lease_id and r.sandbox_id not in self._ending]
        if under:
            log.info("lease lapsed", extra={"lease_id": lease_id, "sandboxes": len(under),
                                            "on_expiry": _name(action)})
        for record in under:
            self._spawn(record, action)

    def _spawn(self, record: cluster_pb2.SandboxRecord, action: int | None,
               orphan: Orphan | None = None) -> None:
        self._ending.add(record.sandbox_id)
        task = asyncio.create_task(self._end(record, action, orphan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(self, record: cluster_pb2.SandboxRecord, action: int | None,
                   orphan: Orphan | None) -> None:
        sandbox_id, lease_id = record.sandbox_id, record.lease_id
        what = decide(record, own_action(record) if action is None else action)
        try:
            async with self._bound:
                # In the trainer's trace: no call parents it, the sandbox's creator does.
                with sandbox_span(tracer, "sandbox.lease_lapsed", record, attributes={
                        "aenv.lease_id": lease_id, "aenv.lease_action": what or "none"}):
                    if orphan is None:
                        await self._act(what, sandbox_id, lease_id)
                    else:
                        await self._act_on_orphan(what, orphan)
            if what is not None:
                self.reaped += 1
        except NotFound:
            pass  # ended meanwhile (its owner, its timeout, its VM): gone either way
        except Conflict as err:
            log.info("lapsed lease's sandbox busy; the next reconcile ends it",
                     extra={"sandbox_id": sandbox_id, "lease_id": lease_id, "error": err.message})
        except AenvError as err:
            log.warning("lapsed lease's sandbox not ended; the next reconcile tries again",
                        extra={"sandbox_id": sandbox_id, "lease_id": lease_id,
                               "error": err.message})
        except Exception:
            log.exception("lapsed lease's sandbox not ended",
                          extra={"sandbox_id": sandbox_id, "lease_id": lease_id})
        finally:
            self._ending.discard(sandbox_id)

    async def _act(self, what: str | None, sandbox_id: str, lease_id: str) -> None:
        if what == "kill":
            await self._sandboxes.kill(sandbox_id, cause=LEASE_EXPIRED, detail=detail(lease_id))
        elif what == "pause":
            await self._sandboxes.pause(sandbox_id, detail=detail(lease_id))
            await self._sandboxes.detach(sandbox_id, lease_id)
        elif what == "detach":
            await self._sandboxes.detach(sandbox_id, lease_id)

    async def _act_on_orphan(self, what: str | None, orphan: Orphan) -> None:
        keeper = self._sandboxes.orphans
        assert keeper is not None  # only a keeper's reconcile finds orphans
        if what == "kill":
            await keeper.kill(orphan, cause=LEASE_EXPIRED, detail=detail(orphan.record.lease_id))
        elif what == "detach":
            await keeper.detach(orphan, orphan.record.lease_id)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.reconcile()
            except AenvError as err:
                log.warning("lease reconcile failed", extra={"error": err.message})
            except Exception:
                log.exception("lease reconcile failed")
