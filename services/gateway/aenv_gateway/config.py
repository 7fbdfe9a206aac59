"""The gateway's settings: one typed place, read from `AENV_GATEWAY_*` (and `AENV_*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from aenv_common.config import CommonSettings
from aenv_common.limits import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_GATEWAY_", extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    # Public HTTP edge: E2B control plane + sandbox data plane.
    listen: str = "127.0.0.1:3000"
    # Native gRPC API (aenv.gateway.v1.GatewayService).
    grpc_listen: str = "127.0.0.1:50050"
    scheduler_address: str = "127.0.0.1:50051"
    # Default: $AENV_HOME/api-key, created on first start.
    api_key_file: Path | None = None
    # Host-based data-plane routing `<port>-<id>.<domain>`; also returned as `domain` to SDKs.
    # Unset: header routing only and `domain: null` in responses.
    domain: str | None = None
    # A deployment may lower the node agents' bounds (aenv_common.limits), never raise them.
    default_timeout_s: int = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    max_timeout_s: int = Field(default=MAX_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    # An Idempotency-Key reused within this window returns the sandbox created first.
    idempotency_ttl_s: float = 600.0
    # Deadlines of calls to the scheduler / node agents (create includes a VM restore).
    create_deadline_s: float = 120.0
    rpc_deadline_s: float = 30.0
    # Returned when a record carries no envd version (SDKs refuse anything below 0.1.0).
    fallback_envd_version: str = "0.5.7"
    # On stop, open streams (process output may flow for hours) get this long to finish before
    # their connections are closed.
    shutdown_grace_s: int = 3

    def resolved_api_key_file(self) -> Path:
        return self.api_key_file or self.common.home / "api-key"

    @staticmethod
    def split_host_port(address: str) -> tuple[str, int]:
        host, _, port = address.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)
