"""The stored API keys over a real etcd: a key created through one gateway's store is known to
another's at once (its watch), and revoking it there cuts that gateway's open requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1.cluster_pb2 import ApiKeyRecord
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_gateway.keys.records import API_KEYS, EtcdApiKeyRecords, KeyIndex, key_digest

pytestmark = pytest.mark.etcd
KEY = "e2b_" + "c0ffee" * 6 + "beef"


@contextlib.asynccontextmanager
async def _gateway_keys(settings: CommonSettings) -> AsyncIterator[tuple[ClusterStore,
                                                                        EtcdApiKeyRecords]]:
    store = await ClusterStore.connect(settings)
    try:
        records = await EtcdApiKeyRecords.open(store)
        try:
            yield store, records
        finally:
            await records.close()
    finally:
        await store.close()


async def _until(condition: object, what: str) -> None:
    for _ in range(100):  # 5 s at most
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within 5 s: {what}")


async def test_keys_are_shared_and_revoked_across_gateways(etcd_settings: CommonSettings) -> None:
    async with (_gateway_keys(etcd_settings) as (store, one),
                _gateway_keys(etcd_settings) as (_, other)):
        seen, revoked = KeyIndex(one), KeyIndex(other)
        gone: list[set[str]] = []
        revoked.on_revoked(gone.append)
        created = Timestamp()
        created.GetCurrentTime()
        await one.put(ApiKeyRecord(key_id="k1", name="ci", sha256=key_digest(KEY),
                                   created_at=created))
        await _until(lambda: revoked.key_id(KEY) == seen.key_id(KEY) == "k1",
                     "both gateways know the key")
        assert seen.key_id(KEY + "x") is None
        raw = await store.get_record(API_KEYS, "k1", ApiKeyRecord)
        assert raw is not None and KEY not in raw.SerializeToString().decode("latin-1")
        await one.delete("k1")
        await _until(lambda: gone == [{"k1"}], "the other gateway cuts the key's requests")
        assert revoked.key_id(KEY) is None
