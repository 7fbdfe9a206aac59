"""The Secret API's operations (E2B's `/secrets`, routes/secrets.py), scoped by API key.

Every call acts on the secrets of one owner, the API key id the edge checked: a key sees,
changes and destroys only its own, and another key's secret answers 404 as a missing one does
(whether it exists elsewhere is not told). The admin key's secrets are the admin key's own.
Values go in through `create`/`update` and never come back out: what is answered is the record
without its sealed value.

`unknown_secrets` is what the network-rule checks ask before a create or `update_network`
accepts `${e2b.secrets.<name>}` placeholders: the names the owner has no secret of.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from aenv.cluster.v1.cluster_pb2 import SecretRecord
from aenv_common.secrets import SecretStore
from aenv_gateway.core.paging import paginate

log = logging.getLogger(__name__)


class GatewaySecrets:
    def __init__(self, store: SecretStore) -> None:
        self._store = store

    async def create(
        self, owner_key_id: str, name: str, value: str, metadata: Mapping[str, str]
    ) -> SecretRecord:
        record = await self._store.create(owner_key_id, name, value, metadata)
        log.info("secret created", extra=_fields(record))
        return record

    async def get(self, owner_key_id: str, ref: str) -> SecretRecord:
        return await self._store.get(owner_key_id, ref)

    async def update(
        self, owner_key_id: str, ref: str, value: str, metadata: Mapping[str, str] | None
    ) -> SecretRecord:
        record = await self._store.update(owner_key_id, ref, value, metadata)
        log.info("secret updated", extra=_fields(record))
        return record

    async def destroy(self, owner_key_id: str, ref: str) -> None:
        record = await self._store.destroy(owner_key_id, ref)
        log.info("secret destroyed", extra=_fields(record))

    async def page(
        self, owner_key_id: str, limit: int, cursor: str | None
    ) -> tuple[list[SecretRecord], str | None]:
        """One page of the owner's secrets, newest first, and the next page's cursor."""
        records = await self._store.list(owner_key_id)
        return paginate(records, lambda r: (r.created_at.ToNanoseconds(), r.secret_id),
                        newest_first=True, limit=limit, cursor=cursor)

    async def unknown_secrets(self, owner_key_id: str, names: Iterable[str]) -> list[str]:
        """The names (sorted, as given) of which `owner_key_id` has no secret."""
        return sorted({n for n in names if not await self._store.exists(owner_key_id, n)})


def _fields(record: SecretRecord) -> dict[str, object]:
    """What a log line may say of a secret (never its value, sealed or not). Not `secret_*`:
    the log formatter redacts every field so named, and id and name are no secrets."""
    return {"owner_key_id": record.owner_key_id, "entry_id": record.secret_id,
            "entry_name": record.name, "version": record.current_version}
