"""Snapstore settings, from `AENV_SNAPSTORE_*` environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from aenv_common.config import CommonSettings


class S3Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_SNAPSTORE_S3_", extra="ignore")

    bucket: str = "aenv-snapstore"
    # Key prefix inside the bucket, so several installs can share one bucket.
    prefix: str = ""
    # Unset = AWS's own endpoint for the region; set for MinIO, Ceph, moto, ...
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # Unset = botocore's usual credential chain (env, profile, instance role).
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    create_bucket: bool = False
    max_connections: int = 32


class SnapstoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AENV_SNAPSTORE_", extra="ignore")

    listen: str = "127.0.0.1:50053"
    # Prometheus /metrics over HTTP (host:port); unset: not served.
    metrics_listen: str | None = None
    backend: Literal["fs", "s3"] = "fs"
    # Filesystem backend root; unset = $AENV_HOME/snapstore.
    fs_root: Path | None = None
    s3: S3Settings = Field(default_factory=S3Settings)
    # Unreferenced chunks younger than this survive collection (a push may still need them).
    gc_grace_seconds: float = 3600.0
    # Seconds between background collections; 0 = only on CollectGarbage calls.
    gc_interval_seconds: float = 3600.0
    # How long a chunk confirmed stored is trusted without asking the backend again.
    presence_cache_seconds: float = 600.0
    # Concurrent backend operations per request.
    io_concurrency: int = 16
    # Volumes' NFSv3 server (MOUNT and NFS on one TCP port): host:port to bind, port 0 = any.
    volume_nfs_listen: str = "127.0.0.1:2049"
    # host:port node agents' relays dial (GetVolumeEndpoint); unset = the bound address. Set it
    # when the bind address is not what nodes reach (0.0.0.0, a Service in front, NAT).
    volume_nfs_advertise: str | None = None
    # Working copies of open volumes (SQLite metadata, cached chunks); unset = $AENV_HOME/volumes.
    volume_work_dir: Path | None = None
    # A new volume's quota when its creator names none.
    volume_default_quota_bytes: int = Field(default=10 << 30, gt=0)
    # Metadata changes (not COMMITted data, which is synced at once) reach the backend within this.
    volume_sync_interval_s: float = Field(default=0.2, gt=0)
    # Seconds between collections of chunks no volume references; 0 = never in the background.
    volume_gc_interval_s: float = Field(default=3600.0, ge=0)
    common: CommonSettings = Field(default_factory=CommonSettings)

    def fs_root_path(self) -> Path:
        return self.fs_root or self.common.home / "snapstore"

    def volume_work_path(self) -> Path:
        return self.volume_work_dir or self.common.home / "volumes"
