"""Ending sandboxes: a kill (running or paused), the timeout's action (a kill, or a pause when
the sandbox asked for one) when its end comes or is set to now, and the kill of everything at
shutdown. Each says how the sandbox ended (sandbox/events.py): KILLED (its owner's kill),
TIMED_OUT, or DIED with a certificate when the kill has a cause (a death the node saw, a lapsed
lease, an administrator, the node agent's stop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time

from opentelemetry import trace

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_common.events import TIMED_OUT_PAUSED, death_message
from aenv_common.rollout import sandbox_span
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.pause import Pauses
from aenv_nodeagent.sandbox.records import timestamp
from aenv_nodeagent.sandbox_metrics import MetricsHistory

log = logging.getLogger(__name__)

KILLED = cluster_pb2.SANDBOX_EVENT_TYPE_KILLED
TIMED_OUT = cluster_pb2.SANDBOX_EVENT_TYPE_TIMED_OUT
UPDATED = cluster_pb2.SANDBOX_EVENT_TYPE_UPDATED
OWNER_KILL = cluster_pb2.DEATH_CAUSE_UNSPECIFIED
STOPPED = "its node agent stopped"
# A death's cause and the words saying why.
Death = tuple[cluster_pb2.DeathCause, str]
tracer = trace.get_tracer(__name__)


class Kills:
    """Kills and expiries of this node's sandboxes."""

    def __init__(
        self, wing: WingContext, pauses: Pauses, metrics_history: MetricsHistory
    ) -> None:
        self._events = wing.events
        self._registry = wing.registry
        self._pauses = pauses
        self._layers = wing.disk
        self._network = wing.network
        self._records = wing.records
        self._metrics_history = metrics_history
        self._cut_traffic = wing.cut_traffic
        self._allocation_changed = wing.allocation_changed
        self._killing: set[str] = set()
        # Sandboxes whose death is announced while their removal is still to succeed, and the
        # words their certificate says.
        self._certified: dict[str, str] = {}

    async def kill(
        self, sandbox_id: str, *, cause: cluster_pb2.DeathCause = OWNER_KILL, detail: str = "",
        stopping: bool = False,
    ) -> None:
        """Remove the sandbox, running or paused, with everything it holds (`stopping`: the
        node agent stops, its VM goes even when etcd cannot be told). Without a cause it is its
        owner's kill (KILLED); with one, a death: DIED and its certificate, `detail` saying why.

        :raise NotFound: no such sandbox, or it is being killed already (by another kill, or
            as its VM exited): for the caller it is gone either way.
        :raise Conflict: another operation holds it.
        """
        if cause == OWNER_KILL:
            record = await self._remove(sandbox_id, stopping=stopping)
            await self._events.announce(record, KILLED, detail=detail)
            return
        await self._remove(sandbox_id, stopping=stopping, death=(cause, detail))

    async def _remove(
        self, sandbox_id: str, *, stopping: bool = False, death: Death | None = None
    ) -> cluster_pb2.SandboxRecord:
        """The kill itself; the record the sandbox had. A `death` is certified (DIED and its
        certificate) once the sandbox is held, before its traffic is cut: whatever the cut
        wakes (a client probing after its stream ended) finds why it ended."""
        if sandbox_id in self._killing:
            raise NotFound(f"sandbox \"{sandbox_id}\" not found")
        self._killing.add(sandbox_id)
        try:
            if paused := self._registry.paused(sandbox_id):
                record = paused.record
                with PhaseTimer.operation("sandbox.kill", paused.record):
                    if self._registry.is_busy(sandbox_id):  # no death of a sandbox that stays
                        raise Conflict(f"sandbox \"{sandbox_id}\" is busy")
                    await self._certify(record, death)
                    await self._pauses.kill(paused)
            else:
                sandbox = self._registry.get(sandbox_id)
                record = sandbox.record
                with self._registry.exclusive(sandbox_id), PhaseTimer.operation(
                        "sandbox.kill", sandbox.record):
                    why = await self._certify(record, death)
                    await self._destroy(sandbox, stopping=stopping, why=why)
        finally:
            self._killing.discard(sandbox_id)
        self._certified.pop(sandbox_id, None)
        self._metrics_history.drop(sandbox_id)
        self._layers.collect()
        log.info("sandbox killed", extra={"sandbox_id": sandbox_id})
        return record

    async def _certify(self, record: cluster_pb2.SandboxRecord, death: Death | None) -> str:
        """The death's DIED event and certificate, once per sandbox: a kill retried after its
        removal failed does not announce the death again. The certificate's words ("" without
        a death, or with events off)."""
        sandbox_id = record.sandbox_id
        if death is None:
            return ""
        if sandbox_id not in self._certified:
            certificate = await self._events.died(record, *death)
            self._certified[sandbox_id] = death_message(certificate) if certificate else ""
        return self._certified[sandbox_id]

    async def expire(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        """Timeout: pause when the sandbox asked for it (lifecycle.auto_pause, keeping what its
        auto_pause_mode says: memory too unless it asked for the filesystem only), else kill.
        The paused record, or None once killed. Announced TIMED_OUT, saying which."""
        sandbox = self._registry.find(sandbox_id)
        # In the trainer's trace (no call started it): the span of its creator is its parent.
        with (sandbox_span(tracer, "sandbox.expire", sandbox.record) if sandbox is not None
              else contextlib.nullcontext()):
            if sandbox is not None and sandbox.record.lifecycle.auto_pause:
                return await self._pauses.pause(
                    sandbox_id, mode=sandbox.record.lifecycle.auto_pause_mode,
                    event=TIMED_OUT, detail=TIMED_OUT_PAUSED)
            record = await self._remove(sandbox_id)
            await self._events.announce(record, TIMED_OUT, detail="killed")
            return None

    async def expire_now(self, sandbox: Sandbox) -> cluster_pb2.SandboxRecord:
        """A timeout of 0 (E2B: "now"): the sandbox's end is now and its timeout action runs at
        once. The record as it leaves it: paused, or a copy in state KILLING once killed. When
        another operation holds the sandbox, or the action fails, the sandbox keeps running
        with its end now, published: the next expiry pass runs the action.

        :raise AenvError: not even the new end could be published.
        """
        sandbox_id = sandbox.sandbox_id
        sandbox.record.end_at.CopyFrom(timestamp(time.time()))
        killed = cluster_pb2.SandboxRecord()
        killed.CopyFrom(sandbox.record)
        killed.state = cluster_pb2.SANDBOX_STATE_KILLING
        if not self._registry.is_busy(sandbox_id):
            try:
                return await self.expire(sandbox_id) or killed
            except NotFound:  # killed meanwhile
                return killed
            except AenvError as err:
                log.warning("timeout action failed, the expiry pass retries",
                            extra={"sandbox_id": sandbox_id, "error": err.message})
                if self._registry.serving(sandbox_id) is None:  # its record is gone already
                    return killed
        await self._events.publish(sandbox.record, UPDATED, detail="timeout 0 s")
        return sandbox.record

    async def expire_due(self, now: float | None = None) -> list[str]:
        """Run the timeout's action on every running sandbox past its end; their ids."""
        now = time.time() if now is None else now
        expired = [sbx.sandbox_id for sbx in self._registry.all()
                   if sbx.record.end_at.ToNanoseconds() / 1e9 <= now
                   and not self._registry.is_busy(sbx.sandbox_id)]
        for sandbox_id in expired:
            try:
                await self.expire(sandbox_id)
            except NotFound:
                pass  # killed meanwhile
            except Exception:  # the next pass tries again; the others expire now
                log.exception("timeout action failed", extra={"sandbox_id": sandbox_id})
        return expired

    async def run_expiry(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expire_due()
            except Exception:
                log.exception("expiry pass failed")

    async def kill_running(self) -> None:
        """Every running sandbox (paused ones stay for the next start). Not their owners' doing:
        each dies by an administrator's hand, the node agent's stop."""
        results = await asyncio.gather(
            *(self.kill(sbx.sandbox_id, stopping=True, cause=cluster_pb2.DEATH_CAUSE_ADMIN_KILL,
                        detail=STOPPED) for sbx in self._registry.all()),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NotFound):
                log.error("kill on shutdown failed", extra={"error": repr(result)})

    async def kill_paused(self) -> None:
        for sandbox_id in self._registry.paused_ids():
            with contextlib.suppress(NotFound, Conflict):
                await self.kill(sandbox_id)

    async def _destroy(self, sandbox: Sandbox, *, stopping: bool = False, why: str = "") -> None:
        sandbox_id = sandbox.sandbox_id
        # The record first: if etcd refuses, nothing is gone yet and a retry does it all. (A
        # crash after it leaves a VM no record names: the next start's recovery kills it.)
        try:
            await self._records.delete_sandbox(sandbox_id)
        except AenvError as err:
            if not stopping:
                raise
            # No retry comes after a stop, and nothing would manage the VM: it goes; the record
            # left is marked lost by the next start's recovery.
            log.warning("sandbox record not deleted at shutdown, its VM stops anyway",
                        extra={"sandbox_id": sandbox_id, "error": err.message})
        self._registry.leaving(sandbox_id)
        # A death's streams end saying why (its certificate is written already).
        await self._cut_traffic(sandbox_id, why)
        # QEMU first: the netns lives on while a process holds it.
        await sandbox.vm.shutdown()
        await self._network.destroy_slot(sandbox.slot)
        shutil.rmtree(sandbox.directory, ignore_errors=True)
        self._registry.remove_running(sandbox_id)
        await self._allocation_changed()
