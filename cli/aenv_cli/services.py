"""What a single-node platform runs: etcd and the four services, in start order, with the
environment that wires them together on loopback."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from aenv_cli.ports import PlatformPorts, address
from aenv_cli.readiness import GrpcHealthProbe, HttpHealthProbe, Probe

ETCD_BINARY = "/usr/bin/etcd"
GATEWAY = "gateway"
NODEAGENT = "nodeagent"


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    argv: Sequence[str]
    probe: Probe
    start_timeout_s: float = 60.0
    # The node agent stops its microVMs before it exits: give it longer than the others.
    stop_timeout_s: float = 10.0
    # Stops what the service started in sessions of its own when it could not stop them itself
    # (it died, or ignored SIGTERM); None: nothing of it outlives its process group.
    cleanup_argv: Sequence[str] | None = None


def etcd_argv(home: Path, ports: PlatformPorts, binary: str = ETCD_BINARY) -> list[str]:
    client = f"http://{address(ports.etcd_client)}"
    peer = f"http://{address(ports.etcd_peer)}"
    return [
        binary,
        "--name=aenv",
        f"--data-dir={home / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=aenv={peer}",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def default_service_table(home: Path, ports: PlatformPorts) -> list[ServiceSpec]:
    """etcd first, the gateway last: each one's dependencies are ready before it starts."""

    def python_module(svc: str) -> list[str]:
        return [sys.executable, "-m", f"aenv_{svc}"]

    return [
        ServiceSpec(
            "etcd",
            etcd_argv(home, ports),
            HttpHealthProbe(f"http://{address(ports.etcd_client)}/health"),
        ),
        ServiceSpec(
            "scheduler", python_module("scheduler"), GrpcHealthProbe(address(ports.scheduler))
        ),
        ServiceSpec(
            "snapstore", python_module("snapstore"), GrpcHealthProbe(address(ports.snapstore))
        ),
        ServiceSpec(
            NODEAGENT,
            python_module(NODEAGENT),
            GrpcHealthProbe(address(ports.nodeagent)),
            start_timeout_s=300.0,  # first start may build guest artifacts and warm its pool
            stop_timeout_s=30.0,
            # Its QEMUs and netns outlive it (restart/cleanup.py).
            cleanup_argv=[*python_module(NODEAGENT), "cleanup"],
        ),
        ServiceSpec(
            GATEWAY,
            python_module(GATEWAY),
            HttpHealthProbe(f"http://{address(ports.gateway_http)}/health"),
        ),
    ]


def with_commands(
    table: Sequence[ServiceSpec], commands: Mapping[str, Sequence[str]]
) -> list[ServiceSpec]:
    """The same table with some services' command lines replaced (tests run stand-ins). A
    replaced service has no cleanup: the real one's would act on what the stand-in never made."""
    unknown = set(commands) - {spec.name for spec in table}
    if unknown:
        raise ValueError(f"no such services: {sorted(unknown)}")
    return [replace(spec, argv=commands[spec.name], cleanup_argv=None)
            if spec.name in commands else spec for spec in table]


def service_environment(
    home: Path, ports: PlatformPorts, base: Mapping[str, str]
) -> dict[str, str]:
    """`base` (the caller's environment, so user overrides like AENV_NODEAGENT_* pass through)
    plus the settings that wire the services together; ours win."""
    env = dict(base)
    env.update(
        {
            "AENV_HOME": str(home),
            "AENV_ETCD_ENDPOINTS": address(ports.etcd_client),
            "AENV_OTEL_TRACE_DIR": str(home / "traces"),
            "AENV_GATEWAY_LISTEN": address(ports.gateway_http),
            "AENV_GATEWAY_GRPC_LISTEN": address(ports.gateway_grpc),
            "AENV_GATEWAY_SCHEDULER_ADDRESS": address(ports.scheduler),
            "AENV_GATEWAY_SNAPSTORE_ADDRESS": address(ports.snapstore),
            "AENV_SCHEDULER_LISTEN": address(ports.scheduler),
            "AENV_NODEAGENT_LISTEN": address(ports.nodeagent),
            "AENV_NODEAGENT_PROXY_LISTEN": address(ports.nodeagent_proxy),
            "AENV_NODEAGENT_SNAPSTORE_ADDRESS": address(ports.snapstore),
            "AENV_SNAPSTORE_LISTEN": address(ports.snapstore),
            "AENV_SNAPSTORE_VOLUME_NFS_LISTEN": address(ports.volume_nfs),
            "AENV_SCHEDULER_METRICS_LISTEN": address(ports.scheduler_metrics),
            "AENV_NODEAGENT_METRICS_LISTEN": address(ports.nodeagent_metrics),
            "AENV_SNAPSTORE_METRICS_LISTEN": address(ports.snapstore_metrics),
            # Logs reach the log files as they are written, not when a buffer fills.
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env

