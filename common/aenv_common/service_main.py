"""The `python -m aenv_<service>` entry point every service shares: logging and telemetry first
(gRPC instrumentation must precede channels and servers), then serve until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Protocol

from aenv_common.config import CommonSettings
from aenv_common.logging import setup_logging
from aenv_common.state_files import StateFileError
from aenv_common.telemetry import setup_telemetry


class Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def serve_until_signal(service: Service) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await service.start()
        await stop.wait()
    finally:
        await service.stop()


def run_service(name: str, common: CommonSettings, build: Callable[[], Service]) -> None:
    """`build` runs after telemetry is set up: import service modules inside it."""
    setup_logging(name, common.log_level, common.log_json)
    setup_telemetry(name, common.telemetry)
    try:
        asyncio.run(serve_until_signal(build()))
    except StateFileError as err:
        # State on disk this build cannot read (most often a newer one's): one line that says
        # so, no traceback, and a status its supervisor reports.
        logging.getLogger(name).critical("cannot start: %s", err.message)
        raise SystemExit(2) from None
