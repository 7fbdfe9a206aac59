"""The Secret API's records and a node's opened values, against a real etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.cluster import ClusterStore
from aenv_common.errors import AlreadyExists, InvalidArgument, NotFound
from aenv_common.secrets import (
    EtcdSecretRecords,
    InMemorySecretRecords,
    SecretsKey,
    SecretStore,
    SecretValues,
)
from aenv_common.secrets.store import open_value

pytestmark = pytest.mark.etcd

VALUE = "sk-live-4f1c2e"


@pytest.fixture
def store(cluster_store: ClusterStore) -> ClusterStore:
    return cluster_store


@pytest.fixture
def key() -> SecretsKey:
    return SecretsKey.generate()


@pytest.fixture
def etcd_secrets(store: ClusterStore, key: SecretsKey) -> SecretStore:
    return SecretStore(EtcdSecretRecords(store), key)


@pytest.fixture(params=["etcd", "memory"])
def secrets(request: pytest.FixtureRequest, etcd_secrets: SecretStore,
            key: SecretsKey) -> SecretStore:
    """The store over each backend: both must keep the same promises."""
    if request.param == "etcd":
        return etcd_secrets
    return SecretStore(InMemorySecretRecords(), key)


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Waits for a watch event to be applied (polled: the mirror offers no event per key)."""
    for _ in range(int(timeout_s / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the watched values never reached the expected state")


async def test_create_get_update_destroy(secrets: SecretStore, store: ClusterStore,
                                         key: SecretsKey) -> None:
    created = await secrets.create("k1", "OpenAI", VALUE, {"team": "ml"})
    assert created.secret_id.startswith("sec_")
    assert (created.name, created.current_version, dict(created.metadata)) == (
        "openai", 1, {"team": "ml"})
    raw = await store.client.get_prefix(store.keys.owner_secrets("k1"))
    assert all(VALUE.encode() not in kv.value for kv in raw.kvs)
    by_name = await secrets.get("k1", "OPENAI")
    by_id = await secrets.get("k1", created.secret_id)
    assert by_name == by_id == created
    assert open_value(key, by_id) == VALUE

    updated = await secrets.update("k1", "openai", "v2", None)
    assert updated.current_version == 2 and dict(updated.metadata) == {"team": "ml"}
    assert open_value(key, await secrets.get("k1", "openai")) == "v2"
    replaced = await secrets.update("k1", created.secret_id, "v3", {})
    assert replaced.current_version == 3 and dict(replaced.metadata) == {}

    destroyed = await secrets.destroy("k1", "openai")
    assert destroyed.secret_id == created.secret_id
    assert not await secrets.exists("k1", "openai")
    with pytest.raises(NotFound, match="secret 'openai' not found"):
        await secrets.get("k1", "openai")
    # The name is free again once destroyed.
    again = await secrets.create("k1", "openai", VALUE, {})
    assert again.secret_id != created.secret_id


async def test_name_is_unique_per_owner_even_when_created_at_once(
    secrets: SecretStore,
) -> None:
    outcomes = await asyncio.gather(
        *(secrets.create("k1", "db", f"v{i}", {}) for i in range(6)), return_exceptions=True)
    won = [o for o in outcomes if isinstance(o, SecretRecord)]
    assert len(won) == 1
    assert all(isinstance(o, AlreadyExists) for o in outcomes if o not in won)
    # Another key may have the same name.
    await secrets.create("k2", "DB", VALUE, {})
    assert await secrets.exists("k2", "db") and await secrets.exists("k1", "db")
    assert [r.name for r in await secrets.list("k1")] == ["db"]


async def test_an_owner_sees_nothing_of_another_owners_secrets(secrets: SecretStore) -> None:
    created = await secrets.create("k1", "token", VALUE, {})
    for ref in ("token", created.secret_id):
        with pytest.raises(NotFound):
            await secrets.get("k2", ref)
        with pytest.raises(NotFound):
            await secrets.update("k2", ref, "x", None)
        with pytest.raises(NotFound):
            await secrets.destroy("k2", ref)
    assert await secrets.list("k2") == []
    assert await secrets.exists("k1", "token")


async def test_malformed_input_is_refused_and_unknown_refs_are_not_found(
    secrets: SecretStore,
) -> None:
    with pytest.raises(InvalidArgument, match="reserved"):
        await secrets.create("k1", "SEC_x", VALUE, {})
    with pytest.raises(InvalidArgument, match="control"):
        await secrets.create("k1", "a{b}", VALUE, {})
    with pytest.raises(InvalidArgument, match="at most 65536 bytes"):
        await secrets.create("k1", "big", "x" * (64 * 1024 + 1), {})
    with pytest.raises(InvalidArgument, match="at most 32 entries"):
        await secrets.create("k1", "meta", VALUE, {str(i): "v" for i in range(33)})
    with pytest.raises(InvalidArgument, match="URL path"):
        await secrets.create("k1", "a/b", VALUE, {})
    for ref in ("nope", "sec_nope", "a/b", "sec_a/b", "x{"):
        with pytest.raises(NotFound):
            await secrets.get("k1", ref)
    assert not await secrets.exists("k1", "")


async def test_values_follow_creates_updates_and_destroys(
    etcd_secrets: SecretStore, store: ClusterStore, key: SecretsKey
) -> None:
    secrets = etcd_secrets
    before = await secrets.create("k1", "early", VALUE, {})
    values = SecretValues(store, key)
    await values.start()
    try:
        assert values.value("k1", "EARLY") == VALUE
        assert values.value("k2", "early") is None
        await secrets.create("k1", "late", "L1", {})
        await eventually(lambda: values.value("k1", "late") == "L1")
        await secrets.update("k1", "late", "L2", None)
        await eventually(lambda: values.value("k1", "late") == "L2")
        await secrets.destroy("k1", before.secret_id)
        await eventually(lambda: values.value("k1", "early") is None)
        assert values.value("k1", "late") == "L2"
        assert VALUE not in repr(values)
    finally:
        await values.stop()


async def test_values_drop_records_sealed_with_another_key(
    etcd_secrets: SecretStore, store: ClusterStore, caplog: pytest.LogCaptureFixture
) -> None:
    await etcd_secrets.create("k1", "foreign", VALUE, {})
    values = SecretValues(store, SecretsKey.generate())
    await values.start()
    try:
        assert values.value("k1", "foreign") is None
    finally:
        await values.stop()
    assert "does not open" in caplog.text and VALUE not in caplog.text
