"""`python -m aenv_snapstore`: serve until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
from concurrent.futures import ThreadPoolExecutor

from aenv_common.logging import setup_logging
from aenv_common.telemetry import setup_telemetry
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore

# Chunk writes spend most of their time blocked in fsync; the default pool (cores + 4 threads)
# would leave the CPU idle and chunk verification queued behind them.
IO_THREADS = 32


async def _serve(settings: SnapstoreSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="snapstore-io"))
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    running = await start_snapstore(settings)
    try:
        await stop.wait()
    finally:
        await running.stop()


def main() -> None:
    settings = SnapstoreSettings()
    setup_logging("snapstore", settings.common.log_level, settings.common.log_json)
    setup_telemetry("snapstore", settings.common.telemetry)
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
