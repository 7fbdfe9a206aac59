"""Free ports for a whole single-node platform, so tests can run beside a live one."""

from __future__ import annotations

from dataclasses import fields

from aenv_cli.ports import PlatformPorts
from aenv_testing.ports import free_port


def free_platform_ports() -> PlatformPorts:
    """Every listen port of the platform, each one the kernel reports free right now."""
    return PlatformPorts(**{f.name: free_port() for f in fields(PlatformPorts)})
