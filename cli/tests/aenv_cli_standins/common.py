"""What every stand-in does: record the environment it got, serve until SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path


def record_environment(name: str) -> None:
    """Writes the AENV_* variables this process received to $AENV_HOME/standin-<name>.json, so
    tests can check what the launcher passed."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AENV_")}
    path = Path(os.environ["AENV_HOME"]) / f"standin-{name}.json"
    path.write_text(json.dumps(env), encoding="utf-8")


async def until_sigterm() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
