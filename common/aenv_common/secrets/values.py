"""Secret values on a node, for filling `${e2b.secrets.<name>}` placeholders at send time.

`SecretValues` mirrors `<prefix>/secrets/` through a watched RecordCache (cluster/cache.py: a
snapshot, then the watch; a failed watch resyncs and sees what was deleted meanwhile) and keeps
each secret's value opened in memory, keyed by (owner key id, canonical name). An update is
seen as the new value, a destroy as None, within the watch's latency (one etcd event), so a
destroyed secret stops being filled in running sandboxes at once.

A record whose value does not open (another cluster's key, tampering) is dropped with an error
log naming its owner and id — never a byte of the value.
"""

from __future__ import annotations

import logging

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.cluster.cache import RecordCache
from aenv_common.cluster.keys import SECRETS
from aenv_common.cluster.store import ClusterStore, Versioned
from aenv_common.errors import InvalidArgument
from aenv_common.secrets.rules import canonical_name
from aenv_common.secrets.sealing import SealBroken, SecretsKey
from aenv_common.secrets.store import open_value

log = logging.getLogger(__name__)

Slot = tuple[str, str]  # (owner key id, canonical name)


class SecretValues:
    def __init__(self, store: ClusterStore, key: SecretsKey) -> None:
        self._key = key
        self._cache = RecordCache(store, SECRETS, SecretRecord)
        self._cache.add_listener(self._changed)
        self._values: dict[Slot, str] = {}
        # "<owner>/<id>" (the cache's record id) -> its slot, to drop it when deleted.
        self._slots: dict[str, Slot] = {}

    async def start(self) -> None:
        """Loads every secret and follows changes. :raise Unavailable: etcd is down."""
        await self._cache.start()

    async def stop(self) -> None:
        await self._cache.stop()
        self._values.clear()
        self._slots.clear()

    def value(self, owner_key_id: str, name: str) -> str | None:
        """The current value of the owner's secret `name` (any case), None if there is none."""
        try:
            return self._values.get((owner_key_id, canonical_name(name)))
        except InvalidArgument:
            return None

    def __repr__(self) -> str:
        return f"SecretValues({len(self._values)} values)"

    def _changed(self, record_id: str, entry: Versioned[SecretRecord] | None) -> None:
        previous = self._slots.pop(record_id, None)
        if previous is not None:
            self._values.pop(previous, None)
        if entry is None:
            return
        record = entry.record
        try:
            opened = open_value(self._key, record)
        except (SealBroken, UnicodeDecodeError):
            log.error("secret value does not open; ignored", extra={
                "owner_key_id": record.owner_key_id, "secret_id": record.secret_id})
            return
        slot = (record.owner_key_id, record.name)
        self._values[slot] = opened
        self._slots[record_id] = slot
