"""Pause and resume: a sandbox stops keeping its memory and disk (or only its flushed disk),
and comes back under the same id.

Pause = the guest is stopped and its device state saved; the pages it changed since the image
its RAM maps are written as a delta onto that image (pinned in its directory) after the call
returns, by its VM's background quit, which then releases its network slot (memory/paused.py).
A guest that runs on no image (after a cold boot) gets a full capture instead, split into an
image of its own in the background. A filesystem pause keeps only the flushed disk. The
sandbox's directory (overlay, state, `sandbox.json`) survives node agent restarts.
Resume = the one restore pipeline (sandbox/restore.py) on the sandbox's own files, in a new QEMU
and netns; it cold-boots after a filesystem pause. On failure it stays paused, intact.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Conflict, Unavailable
from aenv_nodeagent.memory.images import (
    DELTA,
    DEVICES,
    discard_delta,
    discard_image,
    pin_base,
)
from aenv_nodeagent.memory.paused import PendingDelta
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.model import (
    FILESYSTEM,
    FULL,
    PAUSED_MARKER,
    PAUSED_STATE,
    Paused,
    Sandbox,
)
from aenv_nodeagent.sandbox.paused_transfer import PausedTransfer
from aenv_nodeagent.sandbox.restore import Restorer
from aenv_nodeagent.sandbox.sources import resumes_by_boot
from aenv_nodeagent.sandbox.vms import keep_running
from aenv_nodeagent.vmm.errors import CaptureLostVm

log = logging.getLogger(__name__)

PAUSED = cluster_pb2.SANDBOX_EVENT_TYPE_PAUSED
RESUMED = cluster_pb2.SANDBOX_EVENT_TYPE_RESUMED

# How long a pause waits for the guest agent's /health before it calls the guest wedged. A
# healthy TCG guest answers within a second, but a false "wedged" costs the sandbox its memory at
# resume, so the margin covers 2 cores crowded by a fork of 16 busy VMs.
GUEST_PROBE_S = 10.0


class Pauses:
    """Pause, resume and kill of paused sandboxes."""

    def __init__(
        self, wing: WingContext, restorer: Restorer, transfers: PausedTransfer
    ) -> None:
        self._events = wing.events
        self._registry = wing.registry
        self._restorer = restorer
        self._sources = wing.sources
        self._layers = wing.disk
        self._handover = transfers
        self._images = wing.memory_images
        self._ledger = wing.ledger
        self._network = wing.network
        self._envd = wing.envd
        self._records = wing.records
        self._cut_traffic = wing.cut_traffic
        self._allocation_changed = wing.allocation_changed
        self._quits = wing.quits  # paused sandboxes' VMs, quitting
        self._ready_timeout_s = wing.settings.ready_timeout_s

    async def pause(
        self, sandbox_id: str, mode: cluster_pb2.PauseMode = FULL, *,
        require_healthy_guest: bool = False, event: cluster_pb2.SandboxEventType = PAUSED,
        detail: str = "",
    ) -> cluster_pb2.SandboxRecord:
        """Stop the guest keeping memory and disk, or (filesystem mode) only its flushed disk.
        As E2B's, a memory pause of a guest whose agent does not answer is taken anyway and
        marked envd_unresponsive_at_pause (it then resumes only by a cold boot), unless
        `require_healthy_guest`. The paused record is published with `event` (PAUSED; TIMED_OUT
        for a timeout's pause) saying `detail`.

        :raise NotFound: no such running sandbox.
        :raise Conflict: already paused, or busy.
        :raise Unavailable: the guest agent does not answer and the pause needs it; it runs on.
        :raise CaptureLostVm: the capture lost the VM: the sandbox dies with it.
        :raise AenvError: the capture or the record's publication failed; the sandbox runs on.
        """
        if self._registry.paused(sandbox_id) is not None:
            raise Conflict(f"sandbox \"{sandbox_id}\" is already paused")
        sandbox = self._registry.get(sandbox_id)
        await self._layers.compacted(sandbox_id)
        with self._registry.exclusive(sandbox_id), PhaseTimer.operation(
                "sandbox.pause", sandbox.record) as timer:
            delta: PendingDelta | None = None  # to write before the VM quits
            wedged = False
            if mode == FILESYSTEM:
                await timer.timed("sync", self.sync(sandbox))
            else:
                wedged = not await timer.timed("guest_probe", self._envd.answers(
                    sandbox.host, GUEST_PROBE_S))
                if wedged and require_healthy_guest:
                    raise Unavailable("the guest agent did not answer: pause refused, the "
                                      "sandbox keeps running")
                try:
                    delta = await self._capture(sandbox, timer)
                except CaptureLostVm:
                    raise  # no VM to run on: the exit watch reports its death
                except BaseException:
                    await keep_running(sandbox.vm)
                    raise
            record = cluster_pb2.SandboxRecord()
            record.CopyFrom(sandbox.record)
            record.state = cluster_pb2.SANDBOX_STATE_PAUSED
            record.pause_mode = mode
            record.envd_unresponsive_at_pause = wedged
            try:  # before the point of no return: if etcd refuses, the sandbox runs on
                await timer.timed("publish", self._events.publish(record, event,
                                                                  detail=detail))
            except BaseException:
                _drop_capture(sandbox, delta)
                await keep_running(sandbox.vm)
                raise
            self._ledger.retire(sandbox.vm)
            self._quit_soon(sandbox, delta)
            paused = Paused(record, sandbox.directory, self._registry.chain(sandbox_id))
            if mode == FILESYSTEM:
                discard_memory(paused.directory)
            elif delta is None:  # the images it ran on go; the capture is split into its own
                discard_image(paused.directory)
                discard_delta(paused.directory)
                self._sources.paused_capture(paused)
            paused.save()
            # Paused before it is detached: a lookup during the detach's await must find it.
            self._registry.add_paused(paused)
            await timer.timed("detach", self._detach(sandbox_id))
            self._handover.store_soon(paused)
        log.info("sandbox paused", extra={
            "sandbox_id": sandbox_id, "guest_unresponsive": wedged, **timer.fields()})
        return record

    async def resume(self, sandbox_id: str, timeout_s: int = 0, *, reboot: bool = False) -> Sandbox:
        """Restore a paused sandbox under the same id, or cold-boot it from its disk (`reboot`,
        and always after a filesystem-only pause).

        :raise NotFound: no such sandbox.
        :raise Conflict: it is not paused, or busy.
        :raise AenvError: the restore failed; it stays paused, intact.
        """
        paused = self._registry.paused(sandbox_id)
        if paused is None:
            self._registry.get(sandbox_id)  # NotFound for unknown ids
            raise Conflict(f"sandbox \"{sandbox_id}\" is not paused")
        if paused.record.envd_unresponsive_at_pause and not reboot:
            raise Conflict(f"sandbox \"{sandbox_id}\" was paused while its guest agent did not "
                           "answer: it resumes only by a cold boot")
        with self._registry.exclusive(sandbox_id), PhaseTimer.operation(
                "sandbox.resume", paused.record) as timer:
            await timer.timed("previous_quit", self._quits.done(sandbox_id))
            boots = resumes_by_boot(paused, reboot)
            plan = self._sources.for_resume(paused, timeout_s, boots=boots, timer=timer)
            try:
                sandbox = await self._restorer.restore(plan, timer, event=RESUMED)
            except AenvError as err:
                raise type(err)(f"resume of \"{sandbox_id}\" failed, it stays paused: "
                                f"{err.message}") from err
            self._registry.remove_paused(sandbox_id)
            if boots:  # the memory it was paused with (if any) is of no use any more
                await self._images.cancelled(paused.directory)
                discard_memory(paused.directory)
            else:  # loaded: what stays is the base the VM maps now
                (paused.directory / DELTA).unlink(missing_ok=True)
            (paused.directory / PAUSED_MARKER).unlink(missing_ok=True)
            self._handover.forget_stored(paused)
        log.info("sandbox resumed", extra={"sandbox_id": sandbox_id, **timer.fields()})
        return sandbox

    async def kill(self, paused: Paused) -> None:
        """Drop a paused sandbox: its files, its stored state and its record.

        :raise Conflict: busy.
        """
        sandbox_id = paused.record.sandbox_id
        with self._registry.exclusive(sandbox_id):
            await self._quits.done(sandbox_id)
            await self._records.delete_sandbox(sandbox_id)  # first: a failure leaves it all
            self._registry.remove_paused(sandbox_id)
            self._handover.forget_stored(paused)
            await self._images.cancelled(paused.directory)
            shutil.rmtree(paused.directory, ignore_errors=True)

    async def sync(self, sandbox: Sandbox) -> None:
        """The guest's file systems flushed to its disk."""
        await self._envd.sync(sandbox.host, sandbox.record.envd_access_token,
                              timeout_s=self._ready_timeout_s)

    async def settled(self) -> None:
        """Wait for the VMs of paused sandboxes to have quit."""
        await self._quits.all_done()

    async def _detach(self, sandbox_id: str) -> None:
        """Stop tracking a running sandbox whose VM goes (paused), without touching its files."""
        self._registry.remove_running(sandbox_id)
        await self._cut_traffic(sandbox_id)
        await self._allocation_changed()

    async def _capture(self, sandbox: Sandbox, timer: PhaseTimer) -> PendingDelta | None:
        """Stop the guest and save its device state: its memory is a delta onto the image the
        VM runs on, written after the pause returns (memory/paused.py). Or a full capture into
        `paused.state` (None) when it runs on none (after a cold boot)."""
        directory = sandbox.directory
        with timer.phase("prepare"):
            base = await self._sources.running_image(
                sandbox, self._registry.chain(sandbox.sandbox_id))
            if base is not None:
                base = pin_base(base, directory)
                discard_image(directory)  # its own image, if it ran on one, is the base now
                (directory / DELTA).unlink(missing_ok=True)
                dirty = await asyncio.to_thread(self._ledger.since_mapped, sandbox.vm,
                                                base.memory)
        if base is None:
            await timer.timed("capture", sandbox.vm.capture(directory / PAUSED_STATE))
            return None
        pending = PendingDelta(sandbox.vm.pid, directory, dirty)
        try:
            await timer.timed("stop", sandbox.vm.pause())
            await timer.timed("devices", sandbox.vm.save_device_state(directory / DEVICES))
        except BaseException:
            pending.close()
            (directory / DEVICES).unlink(missing_ok=True)
            raise
        return pending

    def _quit_soon(self, sandbox: Sandbox, delta: PendingDelta | None) -> None:
        """Write a paused sandbox's memory delta (if its pause left one to write), quit its VM,
        then release its slot, in the background: the guest is stopped and its disk flushed, so
        the pause need not wait. What needs its files (a resume, a kill, a push to snapstore)
        waits for the quit."""
        sandbox_id = sandbox.sandbox_id

        async def quit_and_release() -> None:
            try:
                if delta is not None:
                    await self._write_delta(sandbox_id, delta)
                await sandbox.vm.shutdown()
            except Exception as err:  # shutdown ends with SIGKILL: only bookkeeping can fail
                log.warning("paused VM did not quit cleanly",
                            extra={"sandbox_id": sandbox_id, "error": str(err)})
            finally:
                self._network.release_slot(sandbox.slot)

        self._quits.start(sandbox_id, quit_and_release())

    async def _write_delta(self, sandbox_id: str, delta: PendingDelta) -> None:
        started = time.perf_counter()
        try:
            pages = await asyncio.to_thread(delta.write)
        except Exception as err:  # it stays paused; a resume reports the missing memory
            log.error("paused sandbox lost its memory: it could not be written",
                      extra={"sandbox_id": sandbox_id, "error": str(err)})
            return
        log.info("paused memory written", extra={
            "sandbox_id": sandbox_id, "delta_pages": pages,
            "write_ms": round((time.perf_counter() - started) * 1000, 1)})


def _drop_capture(sandbox: Sandbox, delta: PendingDelta | None) -> None:
    """What a pause captured, when it does not go ahead after all."""
    if delta is not None:
        delta.close()
        (sandbox.directory / DEVICES).unlink(missing_ok=True)
    (sandbox.directory / PAUSED_STATE).unlink(missing_ok=True)


def discard_memory(directory: Path) -> None:
    """Every memory image a sandbox's directory holds: they are of no use any more."""
    discard_image(directory)
    discard_delta(directory)
    (directory / PAUSED_STATE).unlink(missing_ok=True)
