"""The gateway's settings: one typed place, read from `AENV_GATEWAY_*` (and `AENV_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aenv_common.config import CommonSettings
from aenv_common.limits import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S
from aenv_gateway.rest.edge_limits import EdgeLimits


class TlsCertificate(NamedTuple):
    cert: Path
    key: Path


class TlsEdge(NamedTuple):
    listen: str
    certificate: TlsCertificate


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_GATEWAY_", extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    # Public HTTP edge: E2B control plane + sandbox data plane.
    listen: str = "127.0.0.1:3000"
    # Native gRPC API (aenv.gateway.v1.GatewayService).
    grpc_listen: str = "127.0.0.1:50050"
    # The scheduler replicas, comma-separated: the one that leads places, the others answer
    # UNAVAILABLE and are asked in turn for up to scheduler_failover_s (longer than the
    # schedulers' leader TTL, so a standby's takeover is waited for).
    scheduler_address: str = "127.0.0.1:50051"
    scheduler_failover_s: float = Field(default=15.0, ge=0)
    # Snapstore: where template builds' COPY contexts are uploaded to and volumes are kept
    # (unset: builds without COPY only, and no volumes).
    snapstore_address: str | None = None
    # Default: $AENV_HOME/api-key, created on first start.
    api_key_file: Path | None = None
    # Host-based data-plane routing `<port>-<id>.<domain>`; also returned as `domain` to SDKs.
    # Unset: header routing only and `domain: null` in responses.
    domain: str | None = None
    # The HTTPS edge the SDKs reach with only E2B_DOMAIN set (`https://api.<domain>`,
    # `https://<port>-<id>.<domain>`), e.g. "0.0.0.0:443"; needs `domain` and a certificate for
    # `<domain>` and `*.<domain>`. Unset: plain HTTP on `listen` only.
    tls_listen: str | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # A deployment may lower the node agents' bounds (aenv_common.limits), never raise them.
    default_timeout_s: int = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    max_timeout_s: int = Field(default=MAX_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    # An Idempotency-Key reused within this window returns the sandbox created first.
    idempotency_ttl_s: float = Field(default=600.0, gt=0)
    # A key whose create is in flight on a gateway that died is free again after this long
    # (the lease of that gateway's claims in etcd).
    idempotency_claim_ttl_s: int = Field(default=10, ge=2)
    # Deadlines of calls to the scheduler / node agents (create includes a VM restore).
    create_deadline_s: float = 120.0
    rpc_deadline_s: float = 30.0
    # A create the node agent did not answer (it crashed or restarted meanwhile) is sent again
    # with the same sandbox id for this long (under the SDKs' 60 s request timeout), every
    # interval; one that still fails has its sandbox killed within create_abandon_s.
    create_retry_s: float = Field(default=40.0, ge=0)
    create_retry_interval_s: float = Field(default=1.0, gt=0)
    create_abandon_s: float = Field(default=600.0, ge=0)
    # A template build (pull, unpack, every step, capture) ends with an error after this long.
    build_deadline_s: float = 7200.0
    # Returned when a record carries no envd version (SDKs refuse anything below 0.1.0).
    fallback_envd_version: str = "0.5.7"
    # Slow and endless clients (edge_limits.py): a connection's request headers must be in
    # within header_timeout_s (slowloris, idle sockets); a control-plane request's body holds
    # at most max_body_bytes and is in within body_timeout_s (sandbox traffic and the signed
    # context upload stream unbounded).
    header_timeout_s: float = Field(default=10.0, gt=0)
    max_body_bytes: int = Field(default=4 << 20, gt=0)
    body_timeout_s: float = Field(default=30.0, gt=0)
    # Requests (streams included) one API key may hold open at once, on both edges
    # (keys/open_requests.py); past it, 429 / RESOURCE_EXHAUSTED.
    max_open_requests_per_key: int = Field(default=1024, gt=0)
    # Copy-on-write volume clones of fork children whose sandbox is gone are destroyed every
    # interval, once older than the grace (volumes/sweep.py).
    volume_sweep_interval_s: float = Field(default=30.0, gt=0)
    volume_sweep_grace_s: float = Field(default=120.0, ge=0)
    # A bulk kill or pause (bulk.py) ends at most this many sandboxes at once.
    bulk_concurrency: int = Field(default=32, gt=0)
    # Event streams (events/stream.py): a subscriber more than event_queue_size events
    # behind is cut (it resumes after its last event id); an SSE stream sends a comment
    # every event_heartbeat_s so idle proxies keep it open.
    event_queue_size: int = Field(default=1024, gt=0)
    event_heartbeat_s: float = Field(default=15.0, gt=0)
    # Lifecycle webhooks (webhooks/, docs/webhooks.md): a delivery attempt gets timeout_s for
    # the receiver's answer; failed ones are retried after backoff_initial_s doubling up to
    # backoff_max_s (with jitter), until max_attempts attempts or max_age_s after the first.
    # Receivers on loopback, private or link-local addresses are refused unless allow_private
    # (tests; a cluster whose receivers are on its own network). A key has max_per_key at most.
    webhooks_allow_private: bool = False
    webhooks_timeout_s: float = Field(default=10.0, gt=0)
    webhooks_backoff_initial_s: float = Field(default=1.0, gt=0)
    webhooks_backoff_max_s: float = Field(default=300.0, gt=0)
    webhooks_max_attempts: int = Field(default=10, ge=1)
    webhooks_max_age_s: float = Field(default=3600.0, gt=0)
    webhooks_max_per_key: int = Field(default=100, ge=1)
    # On stop, open streams (process output may flow for hours) get this long to finish before
    # their connections are closed.
    shutdown_grace_s: int = 3

    @model_validator(mode="after")
    def _tls_complete(self) -> GatewaySettings:
        if self.tls_listen is None:
            return self
        missing = [name for name, value in (("domain", self.domain),
                                            ("tls_cert_file", self.tls_cert_file),
                                            ("tls_key_file", self.tls_key_file)) if not value]
        if missing:
            names = ", ".join(f"AENV_GATEWAY_{name.upper()}" for name in missing)
            raise ValueError(f"AENV_GATEWAY_TLS_LISTEN needs {names}")
        return self

    @property
    def edge_limits(self) -> EdgeLimits:
        return EdgeLimits(self.header_timeout_s, self.max_body_bytes, self.body_timeout_s)

    @property
    def tls(self) -> TlsEdge | None:
        """The HTTPS edge, when configured (the validator saw it complete)."""
        if self.tls_listen is None or self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return TlsEdge(self.tls_listen, TlsCertificate(self.tls_cert_file, self.tls_key_file))

    def resolved_api_key_file(self) -> Path:
        return self.api_key_file or self.common.home / "api-key"

    @staticmethod
    def split_host_port(address: str) -> tuple[str, int]:
        host, _, port = address.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)
