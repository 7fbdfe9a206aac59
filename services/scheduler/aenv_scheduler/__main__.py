"""`python -m aenv_scheduler`: run the scheduler until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal

from aenv_common.logging import setup_logging
from aenv_common.telemetry import setup_telemetry
from aenv_scheduler.config import SchedulerSettings


async def _serve(settings: SchedulerSettings) -> None:
    # Imported after telemetry set-up: gRPC instrumentation must precede channels and servers.
    from aenv_scheduler.app import SchedulerApp

    app = SchedulerApp(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
        await stop.wait()
    finally:
        await app.stop()


def main() -> None:
    settings = SchedulerSettings()
    setup_logging("scheduler", settings.common.log_level, settings.common.log_json)
    setup_telemetry("scheduler", settings.common.telemetry)
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
