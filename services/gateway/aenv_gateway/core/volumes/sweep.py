"""The sweep of copy-on-write clones (docs/volumes.md): a clone made for a fork child
(`VolumeRecord.ephemeral_for_sandbox_id`) goes with that child. Every `interval_s` the gateway
destroys the clones whose sandbox no longer exists (killed, timed out, lost: no record, or one
killing or lost), once `grace_s` old (the child's record may not be published yet) and while no
other sandbox or snapshot mounts them (a SHARED fork of the child, a snapshot of it). Every
gateway replica sweeps; a destroy done twice is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError
from aenv_gateway.cluster.directory import SandboxDirectory
from aenv_gateway.core.volumes.operations import Volumes

log = logging.getLogger(__name__)

_GONE = frozenset({cluster_pb2.SANDBOX_STATE_KILLING, cluster_pb2.SANDBOX_STATE_LOST})


class VolumeSweep:
    def __init__(
        self, volumes: Volumes, directory: SandboxDirectory, interval_s: float, grace_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._volumes = volumes
        self._directory = directory
        self._interval = interval_s
        self._grace = grace_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="volume-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep()
            except AenvError as err:  # etcd or snapstore away: the next pass tries again
                log.warning("volume sweep failed", extra={"error": err.message})

    async def sweep(self) -> list[str]:
        """One pass; the ids of the clones destroyed."""
        live = [r for r in self._directory.records() if r.state not in _GONE]
        alive = {r.sandbox_id for r in live}
        mounted = {m.volume_id for r in live for m in r.volume_mounts}
        mounted.update(m.volume_id for s in self._directory.snapshots() for m in s.volume_mounts)
        now = self._clock()
        swept: list[str] = []
        for record in await self._volumes.all():
            owner = record.ephemeral_for_sandbox_id
            age = now - record.created_at.ToNanoseconds() / 1e9
            if (not owner or owner in alive or record.volume_id in mounted or age < self._grace
                    or self._volumes.is_mounting(record.volume_id)):
                continue
            try:
                await self._volumes.remove(record)
            except AenvError as err:
                log.warning("clone not swept", extra={"volume_id": record.volume_id,
                                                       "error": err.message})
                continue
            log.info("clone swept", extra={"volume_id": record.volume_id, "sandbox_id": owner})
            swept.append(record.volume_id)
        return swept
