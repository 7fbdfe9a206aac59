"""The webhooks as the gateway runs them: the registry its routes serve and, over etcd, the
deliverer that campaigns to send them (a gateway without etcd has no events to send)."""

from __future__ import annotations

from aenv_common.cluster import ClusterStore
from aenv_common.events import EventLog
from aenv_common.secrets.sealing import SecretsKey
from aenv_gateway.config import GatewaySettings
from aenv_gateway.core.webhooks.deliverer import WebhookDeliverer
from aenv_gateway.core.webhooks.records import (
    EtcdWebhookRecords,
    InMemoryWebhookRecords,
    WebhookRecords,
)
from aenv_gateway.core.webhooks.registry import WebhookRegistry
from aenv_gateway.core.webhooks.retry import RetryPolicy
from aenv_gateway.core.webhooks.sender import Sender
from aenv_gateway.core.webhooks.targets import Resolve, TargetPolicy, system_resolve


def retry_policy(settings: GatewaySettings) -> RetryPolicy:
    return RetryPolicy(settings.webhooks_backoff_initial_s, settings.webhooks_backoff_max_s,
                       settings.webhooks_max_attempts, settings.webhooks_max_age_s)


class Webhooks:
    def __init__(self, registry: WebhookRegistry,
                 deliverer: WebhookDeliverer | None = None) -> None:
        self.registry = registry
        self.deliverer = deliverer

    @classmethod
    def in_memory(cls, settings: GatewaySettings, key: SecretsKey,
                  resolve: Resolve | None = None) -> Webhooks:
        """Kept in memory: nothing to deliver, so names are not resolved (targets.py)."""
        return cls(_registry(settings, InMemoryWebhookRecords(), key, resolve))

    @classmethod
    def over_etcd(cls, settings: GatewaySettings, store: ClusterStore, key: SecretsKey,
                  resolve: Resolve = system_resolve) -> Webhooks:
        policy = TargetPolicy(settings.webhooks_allow_private, resolve)
        deliverer = WebhookDeliverer(
            store, EventLog(store, settings.common.events_retention_s), key,
            Sender(policy, settings.webhooks_timeout_s), retry_policy(settings))
        return cls(_registry(settings, EtcdWebhookRecords(store), key, resolve), deliverer)

    def start(self) -> None:
        if self.deliverer is not None:
            self.deliverer.start()

    async def stop(self) -> None:
        if self.deliverer is not None:
            await self.deliverer.stop()


def _registry(settings: GatewaySettings, records: WebhookRecords, key: SecretsKey,
              resolve: Resolve | None) -> WebhookRegistry:
    return WebhookRegistry(records, key, TargetPolicy(settings.webhooks_allow_private, resolve),
                           settings.webhooks_max_per_key)
