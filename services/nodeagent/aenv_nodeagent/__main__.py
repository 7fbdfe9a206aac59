"""`python -m aenv_nodeagent`: run the node agent until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal

from aenv_common.logging import setup_logging
from aenv_common.telemetry import setup_telemetry
from aenv_nodeagent.config import NodeAgentSettings


async def _serve(settings: NodeAgentSettings) -> None:
    # Imported after telemetry set-up: gRPC instrumentation must precede channels and servers.
    from aenv_nodeagent.node import NodeAgent

    agent = NodeAgent(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await agent.start()
        await stop.wait()
    finally:
        await agent.stop()


def main() -> None:
    settings = NodeAgentSettings()
    setup_logging("nodeagent", settings.common.log_level, settings.common.log_json)
    setup_telemetry("nodeagent", settings.common.telemetry)
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
