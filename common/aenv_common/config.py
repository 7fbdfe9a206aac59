"""Settings every service shares. Each service has its own typed settings class (in its
`config.py`) that embeds these; values come from the environment (`AENV_*`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_home() -> Path:
    return Path.home() / ".aenv"


class TelemetrySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_OTEL_", extra="ignore")

    # OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces); unset = no OTLP export.
    otlp_endpoint: str | None = None
    # Directory where every service appends its finished spans as JSON lines; read by
    # `aenv trace` and by tests. Unset = no file export.
    trace_dir: Path | None = None
    # Print finished spans to stderr (debugging).
    console: bool = False


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_", extra="ignore")

    # One data directory for all state of a single-node install.
    home: Path = Field(default_factory=default_home)
    # Comma-separated host:port list.
    etcd_endpoints: str = "127.0.0.1:2379"
    # Key prefix in etcd, so several installs (or test runs) can share one etcd.
    etcd_prefix: str = "/aenv/v1"
    log_level: str = "INFO"
    log_json: bool = True
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    # The platform secrets key (aenv_common/secrets/sealing.py): one per cluster, the same file
    # on every gateway and node. Unset: `<home>/secrets.key`.
    secrets_key_file: Path = Field(default=None, validate_default=False)  # type: ignore[assignment]
    # How long sandbox events and death certificates are kept in etcd at least (events/log.py).
    events_retention_s: int = Field(default=86400, ge=60)

    @model_validator(mode="after")
    def _default_secrets_key_file(self) -> CommonSettings:
        if self.secrets_key_file is None:
            self.secrets_key_file = self.home / "secrets.key"
        return self

    def etcd_endpoint_list(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for item in self.etcd_endpoints.split(","):
            host, _, port = item.strip().rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
        return out
