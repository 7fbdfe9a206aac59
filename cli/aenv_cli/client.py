"""The native client (`aenv_client`, clients/python/) pointed at a platform `aenv up` started.

    async with GatewayClient.for_home(Path("~/.aenv").expanduser()) as client:
        sandbox = await client.create_sandbox("base")
        await client.kill_sandbox(sandbox.sandbox_id)
"""

from __future__ import annotations

from pathlib import Path

from aenv_cli.files import read_api_key
from aenv_cli.ports import address
from aenv_cli.state import load_ports
from aenv_client.client import GatewayClient as _NativeClient
from aenv_client.connection import DEFAULT_TIMEOUT_S

__all__ = ["GatewayClient"]


class GatewayClient(_NativeClient):
    @classmethod
    def for_home(cls, home: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> GatewayClient:
        """The platform started by `aenv up --home home`: its gRPC port and generated key."""
        target = address(load_ports(home).gateway_grpc)
        return cls(target, read_api_key(home), timeout_s=timeout_s)

    async def __aenter__(self) -> GatewayClient:
        return self
