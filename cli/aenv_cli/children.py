"""A child process of the platform: started with its output in a log file, stopped by PID."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 40


class ChildProcess:
    def __init__(self, name: str, process: asyncio.subprocess.Process, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._process = process

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @classmethod
    async def spawn(
        cls, name: str, argv: Sequence[str], env: Mapping[str, str], log_path: Path
    ) -> ChildProcess:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if log_path.exists():
            # Keep the previous run's log one generation back: the tail shown on a failure must
            # be this run's, but yesterday's crash is still worth having.
            log_path.replace(log_path.with_name(log_path.name + ".1"))
        with log_path.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                # Own session: a Ctrl-C on the terminal reaches only `aenv up`, which then stops
                # the children in order instead of all of them at once.
                start_new_session=True,
            )
        log.info("child started", extra={"service": name, "pid": process.pid})
        return cls(name, process, log_path)

    async def wait(self) -> int:
        return await self._process.wait()

    async def stop(self, timeout_s: float) -> int:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL the child's process group (its id is the
        child's PID: `start_new_session`), so nothing it started outlives it."""
        if self._process.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self._process.wait(), timeout_s)
            except TimeoutError:
                log.warning(
                    "child ignored SIGTERM, killing", extra={"service": self.name, "pid": self.pid}
                )
        self._kill_group()
        code = await self._process.wait()
        log.info("child stopped", extra={"service": self.name, "pid": self.pid, "code": code})
        return code

    async def crash(self) -> int:
        """SIGKILL the child alone, as a crash ends it: what it started in sessions of its own
        (the node agent's QEMUs) lives on for its successor to take over."""
        self._signal(signal.SIGKILL)
        return await self._process.wait()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signum)

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
