"""Where volume records are kept: etcd in a cluster (`<prefix>/volumes/<id>`, each name claimed
under `<prefix>/volume-names/<owner key id>/<name>`), plain dicts in tests.

A record and its name claim are created in one transaction that holds only while the name is
free, so two gateways creating one name at once make one volume and the other answers 409 (as
template names are claimed: templates/records.py). They are deleted together too.
"""

from __future__ import annotations

from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.store import etcd_errors

VOLUMES = "volumes"
VOLUME_NAMES = "volume-names"

VolumeRecord = cluster_pb2.VolumeRecord


class VolumeRecords(Protocol):
    async def get(self, volume_id: str) -> VolumeRecord | None: ...

    async def every(self) -> list[VolumeRecord]: ...

    async def by_name(self, owner_key_id: str, name: str) -> VolumeRecord | None: ...

    async def create(self, record: VolumeRecord) -> bool:
        """Stores the record and claims its name for its owner, in one write; False (nothing
        written) when the owner already has a volume of that name."""
        ...

    async def delete(self, record: VolumeRecord) -> None:
        """Removes the record and its name claim (absent: no error)."""
        ...


class EtcdVolumeRecords:
    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    def _record_key(self, volume_id: str) -> bytes:
        return self._store.keys.record(VOLUMES, volume_id)

    def _name_key(self, owner_key_id: str, name: str) -> bytes:
        # Names hold no '/' (names.py), so a name addresses exactly one key.
        return self._store.keys.record(VOLUME_NAMES, owner_key_id or "-") + b"/" + name.encode()

    async def get(self, volume_id: str) -> VolumeRecord | None:
        return await self._store.get_record(VOLUMES, volume_id, VolumeRecord)

    async def every(self) -> list[VolumeRecord]:
        return await self._store.list_records(VOLUMES, VolumeRecord)

    async def by_name(self, owner_key_id: str, name: str) -> VolumeRecord | None:
        with etcd_errors(f"get volume name {name}"):
            kv = await self._store.client.get(self._name_key(owner_key_id, name))
        if kv is None:
            return None
        claim = decode(cluster_pb2.CatalogClaim, kv.value)
        return await self.get(claim.holder_id)

    async def create(self, record: VolumeRecord) -> bool:
        name_key = self._name_key(record.owner_key_id, record.name)
        record_key = self._record_key(record.volume_id)
        txn = self._store.client.transactions
        claim = cluster_pb2.CatalogClaim(holder_id=record.volume_id)
        with etcd_errors(f"create volume {record.volume_id}"):
            succeeded, _ = await self._store.client.transaction(
                compare=[txn.mod(name_key) == 0, txn.mod(record_key) == 0],
                success=[txn.put(record_key, encode(record)), txn.put(name_key, encode(claim))],
                failure=[],
            )
        return bool(succeeded)

    async def delete(self, record: VolumeRecord) -> None:
        txn = self._store.client.transactions
        with etcd_errors(f"delete volume {record.volume_id}"):
            await self._store.client.transaction(
                compare=[],
                success=[txn.delete(self._record_key(record.volume_id)),
                         txn.delete(self._name_key(record.owner_key_id, record.name))],
                failure=[],
            )


class InMemoryVolumeRecords:
    """Tests' store, and a gateway's without etcd."""

    def __init__(self) -> None:
        self.records: dict[str, VolumeRecord] = {}
        self.names: dict[tuple[str, str], str] = {}

    async def get(self, volume_id: str) -> VolumeRecord | None:
        found = self.records.get(volume_id)
        return _copy(found) if found is not None else None

    async def every(self) -> list[VolumeRecord]:
        return [_copy(r) for r in self.records.values()]

    async def by_name(self, owner_key_id: str, name: str) -> VolumeRecord | None:
        volume_id = self.names.get((owner_key_id, name))
        return await self.get(volume_id) if volume_id is not None else None

    async def create(self, record: VolumeRecord) -> bool:
        name = (record.owner_key_id, record.name)
        if name in self.names or record.volume_id in self.records:
            return False
        self.records[record.volume_id] = _copy(record)
        self.names[name] = record.volume_id
        return True

    async def delete(self, record: VolumeRecord) -> None:
        self.records.pop(record.volume_id, None)
        if self.names.get((record.owner_key_id, record.name)) == record.volume_id:
            del self.names[record.owner_key_id, record.name]


def _copy(record: VolumeRecord) -> VolumeRecord:
    copied = VolumeRecord()
    copied.CopyFrom(record)
    return copied
