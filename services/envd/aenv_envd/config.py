"""envd configuration: the one typed place where command line and environment are read."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from .trust import TrustPaths

_ENV_PREFIX = "AENV_ENVD_"


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(_ENV_PREFIX + name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class EnvdConfig:
    host: str = "0.0.0.0"
    port: int = 49983
    log_level: str = "INFO"
    # /init may set the guest clock and reseed the kernel RNG; tests on a shared host disable both.
    sync_clock: bool = True
    reseed_rng: bool = True
    # How long a finished process stays connectable: late Connect calls get start + end.
    finished_retention_s: float = 60.0
    # gzip level of /files downloads; 1 keeps the guest CPU cost low under emulation.
    gzip_level: int = 1
    # Replaced after every /init: in-guest servers (the code interpreter) ask /envs again only
    # when it changed, instead of before every request. Empty: not written (the guest's init
    # sets it; a host running envd for tests has no such reader).
    init_marker: str = ""
    # Where /init installs the cluster's egress CA (trust.py); envd run on a host by tests
    # points them elsewhere, never at the host's own trust.
    trust_paths: TrustPaths = field(default_factory=TrustPaths)
    # The longest /init waits for all of its volume mounts (upstream's is 10 s); the caller's
    # own timeout for /init must be longer to hear which mount failed.
    volume_mount_timeout_s: float = 10.0


def load_config(argv: list[str] | None = None) -> EnvdConfig:
    """Builds the config from AENV_ENVD_* environment variables, overridden by options."""
    defaults = EnvdConfig()
    parser = argparse.ArgumentParser(prog="aenv_envd", description="aenv in-guest daemon")
    parser.add_argument("--host", default=os.environ.get(_ENV_PREFIX + "HOST", defaults.host))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get(_ENV_PREFIX + "PORT", defaults.port))
    )
    parser.add_argument(
        "--log-level", default=os.environ.get(_ENV_PREFIX + "LOG_LEVEL", defaults.log_level)
    )
    parser.add_argument(
        "--no-sync-clock",
        dest="sync_clock",
        action="store_false",
        default=_env_bool("SYNC_CLOCK", defaults.sync_clock),
    )
    parser.add_argument(
        "--no-reseed-rng",
        dest="reseed_rng",
        action="store_false",
        default=_env_bool("RESEED_RNG", defaults.reseed_rng),
    )
    parser.add_argument(
        "--init-marker",
        default=os.environ.get(_ENV_PREFIX + "INIT_MARKER", defaults.init_marker),
    )
    parser.add_argument(
        "--egress-ca-file",
        default=os.environ.get(_ENV_PREFIX + "EGRESS_CA_FILE", defaults.trust_paths.ca_file),
    )
    parser.add_argument(
        "--system-ca-bundle", action="append",
        help="a system CA bundle /init may add the egress CA to (repeatable; the first found)",
    )
    parser.add_argument(
        "--volume-mount-timeout-s", type=float,
        default=float(os.environ.get(_ENV_PREFIX + "VOLUME_MOUNT_TIMEOUT_S",
                                     defaults.volume_mount_timeout_s)),
    )
    args = parser.parse_args(argv)
    bundles = args.system_ca_bundle or [
        p for p in os.environ.get(_ENV_PREFIX + "SYSTEM_CA_BUNDLES", "").split(":") if p]
    trust = TrustPaths(args.egress_ca_file,
                       tuple(bundles) if bundles else defaults.trust_paths.system_bundles)
    return EnvdConfig(
        trust_paths=trust,
        init_marker=args.init_marker,
        host=args.host,
        port=args.port,
        log_level=args.log_level.upper(),
        sync_clock=args.sync_clock,
        reseed_rng=args.reseed_rng,
        volume_mount_timeout_s=args.volume_mount_timeout_s,
    )
