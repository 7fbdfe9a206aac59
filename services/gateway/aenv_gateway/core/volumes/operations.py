"""Volume lifecycle (E2B's `/volumes`): records in etcd, data in snapstore's VolumeService.

Nothing is left half-made: a create writes the record and its name claim first (one
transaction), then asks snapstore for the volume, and removes the record if that fails; a
destroy checks that no sandbox mounts the volume, destroys it in snapstore, then removes the
records. A volume is its owner's API key's: any other key sees it as unknown ("Volume not
found", 404), as E2B scopes volumes by team.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, AlreadyExists, Conflict, NotFound, Unavailable
from aenv_common.ids import new_secret
from aenv_gateway.cluster.directory import SandboxDirectory
from aenv_gateway.core.volumes.client import VolumeClient
from aenv_gateway.core.volumes.names import check_name, is_volume_id, new_volume_id
from aenv_gateway.core.volumes.records import VolumeRecord, VolumeRecords

log = logging.getLogger(__name__)

# States of a sandbox that still holds its mounts (a paused one resumes with them).
_GONE = frozenset({cluster_pb2.SANDBOX_STATE_KILLING, cluster_pb2.SANDBOX_STATE_LOST})


def not_found() -> NotFound:
    return NotFound("Volume not found")


class Volumes:
    def __init__(
        self, records: VolumeRecords, client: VolumeClient | None, directory: SandboxDirectory
    ) -> None:
        self._records = records
        self._client = client
        self._directory = directory
        # Volumes that creates and forks of this gateway are granting mounts of right now: a
        # destroy waits for nothing, it refuses (the sandbox's record is not published yet).
        self._mounting: Counter[str] = Counter()

    @property
    def available(self) -> bool:
        """Whether this gateway has a snapstore to keep volumes in."""
        return self._client is not None

    @property
    def client(self) -> VolumeClient:
        """:raise Unavailable: this gateway has no snapstore (`snapstore_address`)."""
        if self._client is None:
            raise Unavailable("volumes need a snapstore: AENV_GATEWAY_SNAPSTORE_ADDRESS is unset")
        return self._client

    async def create(
        self, owner: str, name: str, quota_bytes: int = 0, *, ephemeral_for: str = "",
        cloned_from: str = "",
    ) -> VolumeRecord:
        """A new volume (empty, or a clone of `cloned_from`).

        :raise InvalidArgument: a bad name. :raise AlreadyExists: the owner has that name.
        """
        if not ephemeral_for:
            check_name(name)
        client = self.client
        record = VolumeRecord(
            volume_id=new_volume_id(), name=name, owner_key_id=owner, token=new_secret(),
            quota_bytes=quota_bytes, ephemeral_for_sandbox_id=ephemeral_for,
            cloned_from=cloned_from)
        record.created_at.GetCurrentTime()
        if not await self._records.create(record):
            raise AlreadyExists(f"Volume with name '{name}' already exists")
        try:
            if cloned_from:
                await client.clone(cloned_from, record.volume_id)
            else:
                # 0 stays 0 in the record: snapstore's default quota applies.
                await client.create(record.volume_id, quota_bytes)
        except BaseException:
            await asyncio.shield(self._undo_create(record))
            raise
        log.info("volume created", extra={"volume_id": record.volume_id,
                                          "cloned_from": cloned_from or None})
        return record

    async def _undo_create(self, record: VolumeRecord) -> None:
        try:
            await self.client.destroy(record.volume_id)
        except AenvError as err:
            log.warning("volume not destroyed after a failed create",
                        extra={"volume_id": record.volume_id, "error": err.message})
        await self._records.delete(record)

    async def owned(self, owner: str) -> list[VolumeRecord]:
        records = [r for r in await self._records.every() if r.owner_key_id == owner]
        return sorted(records, key=lambda r: (r.created_at.ToNanoseconds(), r.volume_id))

    async def get(self, owner: str, volume_id: str) -> VolumeRecord:
        """:raise NotFound: unknown, or another key's."""
        record = await self._records.get(volume_id) if is_volume_id(volume_id) else None
        if record is None or record.owner_key_id != owner:
            raise not_found()
        return record

    async def find(self, owner: str, volume: str) -> VolumeRecord:
        """A volume of `owner` by id or name. :raise NotFound: naming what was asked for."""
        record = await self._records.get(volume) if is_volume_id(volume) else None
        if record is None or record.owner_key_id != owner:
            record = await self._records.by_name(owner, volume)
        if record is None or record.owner_key_id != owner:
            raise NotFound(f"volume '{volume}' not found")
        return record

    async def record(self, volume_id: str) -> VolumeRecord | None:
        """Any volume's record, whoever owns it (the content routes check the token)."""
        return await self._records.get(volume_id) if is_volume_id(volume_id) else None

    async def all(self) -> list[VolumeRecord]:
        return await self._records.every()

    def snapshot(self, snapshot_id: str) -> cluster_pb2.SnapshotRecord | None:
        return self._directory.snapshot(snapshot_id) if snapshot_id else None

    def existing(self, sandbox_ids: Iterable[str]) -> set[str]:
        """Those of `sandbox_ids` that have a record (any state but killing or lost)."""
        wanted = set(sandbox_ids)
        return {r.sandbox_id for r in self._directory.records()
                if r.sandbox_id in wanted and r.state not in _GONE}

    def mounted_by(self, volume_id: str) -> list[str]:
        """The sandboxes (running, paused or being made) that mount the volume."""
        return sorted(
            r.sandbox_id for r in self._directory.records()
            if r.state not in _GONE and any(m.volume_id == volume_id for m in r.volume_mounts))

    @contextmanager
    def mounting(self, volume_ids: list[str]) -> Iterator[None]:
        """Marks volumes a create or fork of this gateway is mounting, until it is answered."""
        self._mounting.update(volume_ids)
        try:
            yield
        finally:
            self._mounting.subtract(volume_ids)
            self._mounting += Counter()  # drops the zeros

    def is_mounting(self, volume_id: str) -> bool:
        return self._mounting[volume_id] > 0

    async def destroy(self, owner: str, volume_id: str) -> None:
        """:raise NotFound: unknown or another key's. :raise Conflict: a sandbox mounts it."""
        record = await self.get(owner, volume_id)
        self.check_unused(record)
        await self.remove(record)

    def check_unused(self, record: VolumeRecord) -> None:
        users = self.mounted_by(record.volume_id)
        if users:
            raise Conflict(f"Volume '{record.name}' is mounted by sandboxes: {', '.join(users)}")
        if self.is_mounting(record.volume_id):
            raise Conflict(f"Volume '{record.name}' is being mounted by a sandbox being created")

    async def remove(self, record: VolumeRecord) -> None:
        """Snapstore's volume first, then the records (a failure leaves the record, so the
        delete can be asked again)."""
        await self.client.destroy(record.volume_id)
        await self._records.delete(record)
        log.info("volume destroyed", extra={"volume_id": record.volume_id})
