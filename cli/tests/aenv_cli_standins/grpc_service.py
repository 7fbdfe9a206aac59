"""`python -m aenv_cli_standins.grpc_service NAME LISTEN_ENV [--ignore-sigterm]`: a gRPC server with
health only, listening on the address in $LISTEN_ENV."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from aenv_cli_standins.common import record_environment, until_sigterm
from aenv_common.grpc_server import start_grpc_server


async def main(name: str, listen_env: str, ignore_sigterm: bool) -> None:
    record_environment(name)
    server, _ = await start_grpc_server(os.environ[listen_env], [])
    if ignore_sigterm:
        # A service that hangs on shutdown: the launcher must escalate to SIGKILL.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        await asyncio.Event().wait()
    await until_sigterm()
    await server.stop(grace=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], "--ignore-sigterm" in sys.argv))
