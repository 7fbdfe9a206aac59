"""`python -m aenv_gateway`: run the gateway until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal

from aenv_common.events import EventLog
from aenv_common.logging import setup_logging
from aenv_common.secrets import EtcdSecretRecords, SecretStore, create_key_file
from aenv_common.telemetry import setup_telemetry
from aenv_gateway.config import GatewaySettings
from aenv_gateway.keys.auth import load_or_create_api_key


def instrument_http() -> None:
    """aiohttp client spans (data-plane hops carry traceparent); must precede session creation.
    Server spans come from the ASGI middleware in app.instrumented."""
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor

    instrumentor = AioHttpClientInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


async def _serve(settings: GatewaySettings) -> None:
    # Imported after telemetry set-up: gRPC instrumentation must precede channels and servers.
    from aenv_gateway.cluster.etcd_view import EtcdClusterView
    from aenv_gateway.core.events.store import EtcdEventStore
    from aenv_gateway.core.idempotency_etcd import EtcdKeyClaims
    from aenv_gateway.core.leases import EtcdLeaseStore
    from aenv_gateway.core.templates.records import EtcdTemplateRecords
    from aenv_gateway.core.volumes.records import EtcdVolumeRecords
    from aenv_gateway.core.webhooks.runtime import Webhooks
    from aenv_gateway.keys.records import EtcdApiKeyRecords
    from aenv_gateway.server import start_gateway

    api_key = load_or_create_api_key(settings.resolved_api_key_file())
    # Made here too when the launcher did not (a gateway started on its own); a cluster's nodes
    # must then be given the same file (AENV_SECRETS_KEY_FILE).
    secrets_key = create_key_file(settings.common.secrets_key_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    view = await EtcdClusterView.open(settings.common)
    try:
        records = await EtcdTemplateRecords.open(view.store)
        api_keys = await EtcdApiKeyRecords.open(view.store)
        key_claims = EtcdKeyClaims(view.store, settings.idempotency_ttl_s,
                                   settings.idempotency_claim_ttl_s)
        try:
            gateway = await start_gateway(settings, view, records, api_key, api_keys, key_claims,
                                          SecretStore(EtcdSecretRecords(view.store), secrets_key),
                                          secrets_key, EtcdVolumeRecords(view.store),
                                          EtcdLeaseStore(view.store),
                                          event_store=EtcdEventStore(EventLog(view.store)),
                                          webhooks=Webhooks.over_etcd(settings, view.store,
                                                                      secrets_key))
            try:
                await stop.wait()
            finally:
                await gateway.stop()
        finally:
            await key_claims.close()
            await api_keys.close()
            await records.close()
    finally:
        await view.close()


def main() -> None:
    settings = GatewaySettings()
    setup_logging("gateway", settings.common.log_level, settings.common.log_json)
    setup_telemetry("gateway", settings.common.telemetry)
    instrument_http()
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
