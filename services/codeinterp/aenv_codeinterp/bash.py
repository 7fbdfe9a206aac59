"""Bash contexts: one bash process each, its state (variables, functions, cwd) kept across
cells. A cell is written to a file and sourced, so it runs in that shell; SIGINT ends the
sourced cell (its trap returns from it) and the shell goes on. A non-zero exit status of the
cell is its error, as a shell user reads it."""

from __future__ import annotations

import asyncio
import itertools
import os
import shlex
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence

from . import outputs
from .errors import KernelFailed
from .kernel import OutputQueue
from .streams import MARK, MarkedStreams

STOP_TIMEOUT_S = 5.0
# Interrupted cells return 130, as a shell's Ctrl-C does.
PRELUDE = "trap 'return 130 2>/dev/null' INT\n"


class BashKernel:
    language = "bash"

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._ids = itertools.count(1)
        self._executions = 0  # user cells run, as a Jupyter kernel's execution_count
        self._process: asyncio.subprocess.Process | None = None
        self._streams: MarkedStreams | None = None
        self._cells = tempfile.mkdtemp(prefix="aenv-bash-")

    async def start(self) -> None:
        try:
            self._process = await asyncio.create_subprocess_exec(
                "bash", "--noprofile", "--norc", cwd=self._cwd, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as err:
            raise KernelFailed(f"bash did not start: {err}") from err
        assert self._process.stdout is not None and self._process.stderr is not None
        self._streams = MarkedStreams(self._process.stdout, self._process.stderr)
        await self.quietly(PRELUDE)

    async def execute(self, code: str, outputs_queue: OutputQueue) -> None:
        self._executions += 1
        await outputs_queue.put(outputs.execution_count(self._executions))
        status = await self._run(code, outputs_queue)
        if status not in ("", "0"):
            await outputs_queue.put(outputs.error(
                "ExitCodeError", f"exit status {status}", f"the cell exited with status {status}"))

    async def quietly(self, code: str) -> None:
        await self._run(code, None)

    async def _run(self, code: str, queue: OutputQueue | None) -> str:
        assert self._process is not None and self._process.stdin is not None
        assert self._streams is not None
        if self._process.returncode is not None:
            raise KernelFailed("the bash kernel exited")
        execution_id = str(next(self._ids))
        cell = os.path.join(self._cells, f"{execution_id}.sh")
        await asyncio.to_thread(_write, cell, code + "\n")
        self._streams.begin(execution_id, queue)
        mark = shlex.quote(f"{MARK}{execution_id}")
        self._process.stdin.write(
            f"source {shlex.quote(cell)} </dev/null; printf '%s %s\\n' {mark} $?; "
            f"printf '%s\\n' {mark} >&2; rm -f {shlex.quote(cell)}\n".encode())
        await self._process.stdin.drain()
        await self._streams.ended()
        return self._streams.status

    async def interrupt(self) -> None:
        if self._process is not None and self._process.returncode is None:
            os.killpg(self._process.pid, signal.SIGINT)

    async def restart(self) -> None:
        await self.stop()
        self._ids = itertools.count(1)
        self._executions = 0
        await self.start()

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            await self._process.wait()
        if self._streams is not None:
            await self._streams.close()
        shutil.rmtree(self._cells, ignore_errors=True)

    def env_code(self, values: Mapping[str, str], removed: Sequence[str]) -> str:
        sets = [f"export {k}={shlex.quote(v)}" for k, v in values.items() if k.isidentifier()]
        return "\n".join(sets + [f"unset {k}" for k in removed if k.isidentifier()])

    def reseed_code(self) -> str:
        return "RANDOM=$(od -An -N2 -tu2 /dev/urandom)"


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)
