"""`python -m aenv_cli_standins.gateway [--no-api-key]`: writes an API key to
$AENV_HOME/api-key (0600), serves GET /health on AENV_GATEWAY_LISTEN and a small in-memory
GatewayService on AENV_GATEWAY_GRPC_LISTEN that insists on the `x-api-key` metadata."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_cli_standins.common import record_environment, until_sigterm
from aenv_common.errors import NotFound, Unauthenticated
from aenv_common.grpc_server import start_grpc_server
from aenv_common.ids import new_api_key


class Gateway(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, api_key: str) -> None:
        self._api_key = api_key
        self._sandboxes = {
            sid: cluster_pb2.SandboxRecord(
                sandbox_id=sid,
                node_id="standin-node",
                template_id="base",
                state=cluster_pb2.SANDBOX_STATE_RUNNING,
                metadata={"who": "standin"},
            )
            for sid in ("sbxaaaa", "sbxbbbb")
        }

    def _authenticate(self, context: Any) -> None:
        if dict(context.invocation_metadata()).get("x-api-key") != self._api_key:
            raise Unauthenticated("bad api key")

    async def ListSandboxes(
        self, request: gateway_pb2.ListSandboxesRequest, context: Any
    ) -> gateway_pb2.ListSandboxesResponse:
        self._authenticate(context)
        return gateway_pb2.ListSandboxesResponse(sandboxes=list(self._sandboxes.values()))

    async def GetSandbox(
        self, request: gateway_pb2.GetSandboxRequest, context: Any
    ) -> gateway_pb2.GetSandboxResponse:
        self._authenticate(context)
        if request.sandbox_id not in self._sandboxes:
            raise NotFound(f"sandbox {request.sandbox_id} not found")
        return gateway_pb2.GetSandboxResponse(sandbox=self._sandboxes[request.sandbox_id])

    async def KillSandbox(
        self, request: gateway_pb2.KillSandboxRequest, context: Any
    ) -> gateway_pb2.KillSandboxResponse:
        self._authenticate(context)
        if self._sandboxes.pop(request.sandbox_id, None) is None:
            raise NotFound(f"sandbox {request.sandbox_id} not found")
        return gateway_pb2.KillSandboxResponse()


async def health(_: web.Request) -> web.Response:
    return web.Response(status=200)


def write_api_key(home: Path) -> str:
    key = new_api_key()
    fd = os.open(home / "api-key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (key + "\n").encode())
    os.close(fd)
    return key


async def main(write_key: bool) -> None:
    record_environment("gateway")
    key = write_api_key(Path(os.environ["AENV_HOME"])) if write_key else ""
    server, _ = await start_grpc_server(
        os.environ["AENV_GATEWAY_GRPC_LISTEN"],
        [
            (
                gateway_pb2_grpc.add_GatewayServiceServicer_to_server,
                Gateway(key),
                "aenv.gateway.v1.GatewayService",
            )
        ],
    )
    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    host, _, port = os.environ["AENV_GATEWAY_LISTEN"].rpartition(":")
    await web.TCPSite(runner, host, int(port)).start()
    await until_sigterm()
    await runner.cleanup()
    await server.stop(grace=1)


if __name__ == "__main__":
    asyncio.run(main("--no-api-key" not in sys.argv))
