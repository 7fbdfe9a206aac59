"""Volume records over a real etcd: a record and its name claim are made in one transaction
(a name taken by another volume of the key refuses the whole write), found by id and name, and
deleted together; another key may use the same name."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_gateway.core.volumes.names import new_volume_id
from aenv_gateway.core.volumes.records import VOLUME_NAMES, EtcdVolumeRecords

pytestmark = pytest.mark.etcd


def _record(name: str, owner: str = "k1") -> cluster_pb2.VolumeRecord:
    return cluster_pb2.VolumeRecord(volume_id=new_volume_id(), name=name, owner_key_id=owner,
                                    token="secret")


async def test_records_and_names_move_together(cluster_store: ClusterStore) -> None:
    records = EtcdVolumeRecords(cluster_store)
    first = _record("data")
    assert await records.create(first)
    assert not await records.create(_record("data"))  # the key's name is taken
    assert await records.create(_record("data", owner="k2"))  # another key's is not
    assert await records.get(first.volume_id) == first
    assert await records.by_name("k1", "data") == first
    assert len(await records.every()) == 2
    await records.delete(first)
    assert await records.get(first.volume_id) is None
    assert await records.by_name("k1", "data") is None
    claims = await cluster_store.client.get_prefix(cluster_store.keys.collection(VOLUME_NAMES))
    assert [kv.key.decode().rsplit("/", 2)[-2:] for kv in claims.kvs] == [["k2", "data"]]
    assert await records.create(_record("data"))  # free again
