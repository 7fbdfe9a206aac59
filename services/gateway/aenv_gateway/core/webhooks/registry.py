"""The webhook API's operations (E2B's `/events/webhooks`, routes/webhooks.py), scoped by key.

A webhook belongs to the API key that registered it (E2B's team): a key sees, changes and
deletes only its own, and another key's answers 404 as a missing one does. The signature secret
goes in sealed with the platform secrets key (bound to the webhook's owner and id, as secret
values are: aenv_common.secrets.sealing) and never comes back out: no answer, log line or error
holds it. A URL is checked against the target policy (targets.py) whenever it is set.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1.cluster_pb2 import WebhookDelivery, WebhookRecord
from aenv_common.errors import Conflict, InvalidArgument, NotFound, ResourceExhausted
from aenv_common.secrets.sealing import SecretsKey, open_sealed, seal
from aenv_gateway.core.webhooks.payload import E2B_TYPES_SUBSCRIBABLE as E2B_TYPES
from aenv_gateway.core.webhooks.records import WebhookRecords
from aenv_gateway.core.webhooks.targets import TargetPolicy

log = logging.getLogger(__name__)

MAX_NAME = 256
MAX_SECRET = 1024
_ATTEMPTS = 16
# A re-enabled webhook's cursor: "after this etcd revision" (events while it was off are not
# sent). An event id never starts with "@".
REVISION_CURSOR = "@"


@dataclass(frozen=True)
class WebhookSpec:
    """E2B's WebhookCreate."""

    name: str
    url: str
    events: Sequence[str]
    signature_secret: str
    enabled: bool = True


@dataclass(frozen=True)
class WebhookChanges:
    """E2B's WebhookConfiguration: None leaves a field as it is."""

    name: str | None = None
    url: str | None = None
    events: Sequence[str] | None = None
    signature_secret: str | None = None
    enabled: bool | None = None


def secret_aad(owner_key_id: str, webhook_id: str) -> bytes:
    return f"aenv-webhook-secret\0{owner_key_id}\0{webhook_id}".encode()


def open_secret(key: SecretsKey, record: WebhookRecord) -> str:
    """:raise SealBroken: the secret does not open with `key`."""
    return open_sealed(key, record.sealed_signature_secret,
                       secret_aad(record.owner_key_id, record.webhook_id)).decode()


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


def _name(value: str) -> str:
    if not value.strip():
        raise InvalidArgument("name must not be empty")
    if len(value) > MAX_NAME:
        raise InvalidArgument(f"name is longer than {MAX_NAME} characters")
    return value


def _events(values: Sequence[str]) -> list[str]:
    unknown = sorted(set(values) - E2B_TYPES)
    if unknown:
        raise InvalidArgument(
            f"unknown event types {unknown}; known: {sorted(E2B_TYPES)}")
    if not values:
        raise InvalidArgument("events must name at least one event type")
    return sorted(set(values))


def _secret(value: str) -> bytes:
    if not value:
        raise InvalidArgument("signatureSecret must not be empty")
    if len(value) > MAX_SECRET:
        raise InvalidArgument(f"signatureSecret is longer than {MAX_SECRET} characters")
    return value.encode()


class WebhookRegistry:
    def __init__(self, records: WebhookRecords, key: SecretsKey, policy: TargetPolicy,
                 max_per_key: int) -> None:
        self._records = records
        self._key = key
        self._policy = policy
        self._max_per_key = max_per_key

    async def create(self, owner_key_id: str, spec: WebhookSpec) -> WebhookRecord:
        """:raise InvalidArgument: a bad field or a URL the policy refuses.
        :raise ResourceExhausted: the key has as many webhooks as it may (also when creates
        race: records.py). :raise Conflict: racing creates of the key kept winning."""
        record = WebhookRecord(
            webhook_id=str(uuid.uuid4()), owner_key_id=owner_key_id, name=_name(spec.name),
            url=spec.url, enabled=spec.enabled, events=_events(spec.events),
            created_at=_now())
        secret = _secret(spec.signature_secret)
        await self._policy.check(spec.url)
        record.updated_at.CopyFrom(record.created_at)
        record.sealed_signature_secret = seal(
            self._key, secret, secret_aad(owner_key_id, record.webhook_id))
        if not await self._records.create(record, self._max_per_key):
            raise ResourceExhausted(
                f"a key may have {self._max_per_key} webhooks; delete one first")
        log.info("webhook registered", extra=_fields(record))
        return record

    async def list(self, owner_key_id: str) -> list[WebhookRecord]:
        """The key's webhooks, oldest first."""
        mine = [r for r in await self._records.every() if r.owner_key_id == owner_key_id]
        return sorted(mine, key=lambda r: (r.created_at.ToNanoseconds(), r.webhook_id))

    async def get(self, owner_key_id: str, webhook_id: str) -> WebhookRecord:
        """:raise NotFound: the key has no such webhook."""
        found = await self._records.get(webhook_id)
        if found is None or found.record.owner_key_id != owner_key_id:
            raise NotFound(f"webhook '{webhook_id}' not found")
        return found.record

    async def update(
        self, owner_key_id: str, webhook_id: str, changes: WebhookChanges
    ) -> WebhookRecord:
        """Applies the given fields. A webhook turned on again is sent the events from then on,
        not those of while it was off.

        :raise NotFound: no such webhook. :raise InvalidArgument: a bad field or URL.
        :raise Conflict: other writers kept changing it."""
        name = None if changes.name is None else _name(changes.name)
        events = None if changes.events is None else _events(changes.events)
        secret = None if changes.signature_secret is None else _secret(changes.signature_secret)
        if changes.url is not None:
            await self._policy.check(changes.url)
        for _ in range(_ATTEMPTS):
            found = await self._records.get(webhook_id)
            if found is None or found.record.owner_key_id != owner_key_id:
                raise NotFound(f"webhook '{webhook_id}' not found")
            record = found.record
            if changes.enabled and not record.enabled:
                record.cursor_event_id = f"{REVISION_CURSOR}{await self._records.revision()}"
            if changes.enabled is not None:
                record.enabled = changes.enabled
            if name is not None:
                record.name = name
            if changes.url is not None:
                record.url = changes.url
            if events is not None:
                del record.events[:]
                record.events.extend(events)
            if secret is not None:
                record.sealed_signature_secret = seal(
                    self._key, secret, secret_aad(owner_key_id, webhook_id))
            record.updated_at.CopyFrom(_now())
            if await self._records.swap(record, found.mod_revision):
                log.info("webhook updated", extra=_fields(record))
                return record
        raise Conflict(f"webhook '{webhook_id}' kept changing; update abandoned")

    async def delete(self, owner_key_id: str, webhook_id: str) -> None:
        """:raise NotFound: the key has no such webhook."""
        record = await self.get(owner_key_id, webhook_id)
        if not await self._records.delete(webhook_id):
            raise NotFound(f"webhook '{webhook_id}' not found")
        log.info("webhook deleted", extra=_fields(record))

    async def deliveries(
        self, owner_key_id: str, webhook_id: str, limit: int
    ) -> builtins.list[WebhookDelivery]:
        """The newest `limit` deliveries of the key's webhook, newest first."""
        await self.get(owner_key_id, webhook_id)
        logged = await self._records.deliveries(webhook_id)
        return list(reversed(logged))[:limit]


def _fields(record: WebhookRecord) -> dict[str, object]:
    """What a log line may say of a webhook: not its URL (a query may carry a receiver's token)
    and never its secret."""
    return {"webhook_id": record.webhook_id, "owner_key_id": record.owner_key_id,
            "enabled": record.enabled, "event_types": list(record.events)}
