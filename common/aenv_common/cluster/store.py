"""Typed access to the cluster records in etcd (aetcd client)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aetcd
import aetcd.exceptions
from google.protobuf.message import Message

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster import keys as k
from aenv_common.cluster.codec import decode, encode
from aenv_common.cluster.target import grpc_target
from aenv_common.config import CommonSettings

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

# Per-call deadline: a hung etcd must surface as Unavailable, not hang a request forever.
CALL_TIMEOUT_SECONDS = 5
# Listing all sandboxes of a big cluster exceeds gRPC's default 4 MiB receive limit.
_CHANNEL_OPTIONS = {"grpc.max_receive_message_length": 256 * 1024 * 1024}
UPDATE_ATTEMPTS = 64


@contextlib.contextmanager
def etcd_errors(what: str) -> Iterator[None]:
    """Maps aetcd's client errors to the typed errors callers handle."""
    try:
        yield
    except (aetcd.exceptions.ConnectionFailedError, aetcd.exceptions.ConnectionTimeoutError) as e:
        raise errors.Unavailable(f"etcd unavailable during {what}: {e}") from e
    except aetcd.exceptions.ClientError as e:
        raise errors.Internal(f"etcd error during {what}: {e}") from e


def lease_gone(err: errors.AenvError) -> bool:
    """The etcd write failed because its lease no longer exists (revoked, expired, or etcd
    restored from an older state): the caller may take a new lease and write again."""
    cause = err.__cause__
    return isinstance(cause, aetcd.exceptions.ClientError) and "lease not found" in str(cause)


@dataclass(frozen=True)
class Versioned(Generic[M]):
    """A record with the etcd metadata of its key."""

    record: M
    mod_revision: int
    create_revision: int
    lease: int


class ClusterStore:
    def __init__(self, client: aetcd.Client, keys: k.EtcdKeys) -> None:
        self.client = client
        self.keys = keys

    @classmethod
    async def connect(cls, settings: CommonSettings) -> ClusterStore:
        """Connects to `settings.etcd_endpoints`: one channel over them all, which moves to
        another member when its own goes away (cluster/target.py)."""
        keys = k.EtcdKeys(settings.etcd_prefix)
        try:
            host, port = grpc_target(settings.etcd_endpoint_list())
        except OSError as e:  # a member's name did not resolve (yet)
            raise errors.Unavailable(f"etcd endpoints {settings.etcd_endpoints}: {e}") from e
        client = aetcd.Client(
            host, port, timeout=CALL_TIMEOUT_SECONDS, options=dict(_CHANNEL_OPTIONS)
        )
        try:
            await client.status()
        except aetcd.exceptions.ClientError as e:
            await client.close()
            raise errors.Unavailable(
                f"etcd is unreachable at {settings.etcd_endpoints} ({e})"
            ) from e
        log.info("connected to etcd", extra={"endpoints": settings.etcd_endpoints})
        return cls(client, keys)

    async def close(self) -> None:
        await self.client.close()

    # Generic record access -------------------------------------------------------------

    async def put_record(
        self, kind: str, record_id: str, record: Message, *, lease: int | None = None
    ) -> int:
        """Writes a record; returns the etcd revision of the write."""
        with etcd_errors(f"put {kind}/{record_id}"):
            result = await self.client.put(self.keys.record(kind, record_id), encode(record), lease)
        revision: int = result.header.revision
        return revision

    async def get_versioned(
        self, kind: str, record_id: str, record_type: type[M]
    ) -> Versioned[M] | None:
        with etcd_errors(f"get {kind}/{record_id}"):
            kv = await self.client.get(self.keys.record(kind, record_id))
        if kv is None:
            return None
        record = decode(record_type, kv.value)
        return Versioned(record, kv.mod_revision, kv.create_revision, kv.lease)

    async def _exists(self, key: bytes) -> bool:
        with etcd_errors(f"get {key.decode()}"):
            return await self.client.get(key) is not None

    async def get_record(self, kind: str, record_id: str, record_type: type[M]) -> M | None:
        found = await self.get_versioned(kind, record_id, record_type)
        return None if found is None else found.record

    async def delete_record(self, kind: str, record_id: str) -> None:
        with etcd_errors(f"delete {kind}/{record_id}"):
            await self.client.delete(self.keys.record(kind, record_id))

    async def snapshot(
        self, kind: str, record_type: type[M]
    ) -> tuple[int, dict[str, Versioned[M]]]:
        """Every record of one kind and the revision they were read at."""
        with etcd_errors(f"list {kind}"):
            result = await self.client.get_prefix(self.keys.collection(kind))
        records: dict[str, Versioned[M]] = {}
        for kv in result.kvs:
            record_id = self.keys.id_from_key(kind, kv.key)
            try:
                record = decode(record_type, kv.value)
            except errors.Internal:
                log.error("skipping corrupt record", extra={"kind": kind, "record_id": record_id})
                continue
            records[record_id] = Versioned(record, kv.mod_revision, kv.create_revision, kv.lease)
        return result.header.revision, records

    async def list_records(self, kind: str, record_type: type[M]) -> list[M]:
        _, records = await self.snapshot(kind, record_type)
        return [v.record for v in records.values()]

    async def update_record(
        self, kind: str, record_id: str, record_type: type[M], mutate: Callable[[M], None], *,
        unless: tuple[str, str] | None = None,
    ) -> M:
        """Read-modify-write guarded by the key's mod revision, retried when another writer won
        the race. The key keeps its lease. With `unless` (a kind and id), written only while
        that record is absent, in the same transaction.

        :raise NotFound: the record does not exist.
        :raise Conflict: it kept changing, or the `unless` record exists.
        """
        key = self.keys.record(kind, record_id)
        guard = None if unless is None else self.keys.record(*unless)
        for attempt in range(UPDATE_ATTEMPTS):
            current = await self.get_versioned(kind, record_id, record_type)
            if current is None:
                raise errors.NotFound(f"{kind} '{record_id}' not found")
            record = current.record
            mutate(record)
            if await self._put_if_unchanged(key, record, current, guard):
                return record
            if guard is not None and await self._exists(guard):
                assert unless is not None
                raise errors.Conflict(f"{unless[0]} '{unless[1]}' exists")
            # Jittered back-off so racing writers spread out instead of colliding again.
            await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise errors.Conflict(f"{kind} '{record_id}' kept changing; update abandoned")

    async def put_guarded(
        self, kind: str, record_id: str, mod_revision: int, *writes: tuple[str, str, Message]
    ) -> bool:
        """Puts every `(kind, id, record)` of `writes` in one transaction, only while the key of
        `kind/record_id` is at `mod_revision` (0: absent): create-if-absent and compare-and-swap
        that hold across processes. False when another writer changed the key first."""
        key = self.keys.record(kind, record_id)
        txn = self.client.transactions
        with etcd_errors(f"guarded put {kind}/{record_id}"):
            succeeded, _ = await self.client.transaction(
                compare=[txn.mod(key) == mod_revision],
                success=[txn.put(self.keys.record(*w[:2]), encode(w[2])) for w in writes],
                failure=[],
            )
        return bool(succeeded)

    async def delete_guarded(self, kind: str, record_id: str, mod_revision: int) -> bool:
        """Deletes the record only while its key is at `mod_revision`."""
        key = self.keys.record(kind, record_id)
        txn = self.client.transactions
        with etcd_errors(f"guarded delete {kind}/{record_id}"):
            succeeded, _ = await self.client.transaction(
                compare=[txn.mod(key) == mod_revision], success=[txn.delete(key)], failure=[])
        return bool(succeeded)

    async def _put_if_unchanged(
        self, key: bytes, record: Message, seen: Versioned[Any], absent: bytes | None = None
    ) -> bool:
        txn = self.client.transactions
        compare = [txn.mod(key) == seen.mod_revision]
        if absent is not None:
            compare.append(txn.version(absent) == 0)
        with etcd_errors(f"update {key.decode()}"):
            succeeded, _ = await self.client.transaction(
                compare=compare,
                success=[txn.put(key, encode(record), seen.lease or None)],
                failure=[],
            )
        return bool(succeeded)

    # Sandboxes ---------------------------------------------------------------------------

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord, *, lease: int | None = None) -> int:
        return await self.put_record(k.SANDBOXES, rec.sandbox_id, rec, lease=lease)

    async def get_sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None:
        return await self.get_record(k.SANDBOXES, sandbox_id, cluster_pb2.SandboxRecord)

    async def delete_sandbox(self, sandbox_id: str) -> None:
        await self.delete_record(k.SANDBOXES, sandbox_id)

    async def list_sandboxes(self) -> list[cluster_pb2.SandboxRecord]:
        return await self.list_records(k.SANDBOXES, cluster_pb2.SandboxRecord)

    async def update_sandbox(
        self, sandbox_id: str, mutate: Callable[[cluster_pb2.SandboxRecord], None]
    ) -> cluster_pb2.SandboxRecord:
        return await self.update_record(k.SANDBOXES, sandbox_id, cluster_pb2.SandboxRecord, mutate)

    # Nodes -------------------------------------------------------------------------------

    async def put_node(self, rec: cluster_pb2.NodeRecord, *, lease: int | None = None) -> int:
        return await self.put_record(k.NODES, rec.node_id, rec, lease=lease)

    async def get_node(self, node_id: str) -> cluster_pb2.NodeRecord | None:
        return await self.get_record(k.NODES, node_id, cluster_pb2.NodeRecord)

    async def list_nodes(self) -> list[cluster_pb2.NodeRecord]:
        return await self.list_records(k.NODES, cluster_pb2.NodeRecord)

    # Templates ---------------------------------------------------------------------------

    async def put_template(self, rec: cluster_pb2.TemplateRecord) -> int:
        return await self.put_record(k.TEMPLATES, rec.template_id, rec)

    async def get_template(self, template_id: str) -> cluster_pb2.TemplateRecord | None:
        return await self.get_record(k.TEMPLATES, template_id, cluster_pb2.TemplateRecord)

    async def list_templates(self) -> list[cluster_pb2.TemplateRecord]:
        return await self.list_records(k.TEMPLATES, cluster_pb2.TemplateRecord)

    async def delete_template(self, template_id: str) -> None:
        await self.delete_record(k.TEMPLATES, template_id)
