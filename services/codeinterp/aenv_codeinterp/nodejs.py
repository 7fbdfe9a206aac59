"""JavaScript contexts: one Node.js process each, running node_kernel.mjs (no Jupyter kernel:
Node has no ZeroMQ here). Requests and replies go over a socket pair (the fd number of its end
is the script's argument); its stdout and stderr stream the cell's output (streams.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import signal
import socket
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from . import outputs
from .errors import KernelFailed
from .kernel import OutputQueue
from .streams import MarkedStreams

log = logging.getLogger(__name__)

NODE = "node"
# Node's own CA list is fixed at start, and the default contexts start in the template, before
# any sandbox's /init. With OpenSSL's store instead (the system bundle, or SSL_CERT_FILE as
# the context's catch-up sets it, read at the first TLS connection) a warm context trusts the
# cluster's egress CA that /init installs (docs/egress.md, "Egress: header rules and TLS").
NODE_FLAGS = ("--use-openssl-ca",)
STOP_TIMEOUT_S = 5.0
# A cell SIGINT cannot end (a busy loop inside an async cell) is given this long, then its
# process is started anew: the context loses its state rather than hang.
INTERRUPT_GRACE_S = 3.0


class NodeKernel:
    language = "javascript"

    def __init__(self, cwd: str) -> None:
        self._cwd = cwd
        self._ids = itertools.count(1)
        self._executions = 0  # user cells run, as a Jupyter kernel's execution_count
        self._process: asyncio.subprocess.Process | None = None
        self._streams: MarkedStreams | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._replies: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._receiving: asyncio.Task[None] | None = None
        self._running = ""  # the id of the cell the process is running, if any

    async def start(self) -> None:
        script = resources.files(__package__).joinpath("node_kernel.mjs")
        ours, theirs = socket.socketpair()
        try:
            with resources.as_file(script) as path:
                self._process = await asyncio.create_subprocess_exec(
                    NODE, *NODE_FLAGS, str(path), str(theirs.fileno()), cwd=self._cwd,
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, pass_fds=(theirs.fileno(),))
        except OSError as err:
            ours.close()
            raise KernelFailed(f"Node.js did not start: {err}") from err
        finally:
            theirs.close()
        assert self._process.stdout is not None and self._process.stderr is not None
        self._streams = MarkedStreams(self._process.stdout, self._process.stderr)
        reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        self._receiving = asyncio.create_task(self._receive(reader))
        await self.quietly("undefined")  # answers once Node is up

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        while raw := await reader.readline():
            reply: dict[str, Any] = json.loads(raw)
            if (replies := self._replies.get(str(reply.get("id")))) is not None:
                await replies.put(reply)
        for replies in self._replies.values():  # the process is gone
            await replies.put({"type": "exited"})

    async def execute(self, code: str, outputs_queue: OutputQueue) -> None:
        self._executions += 1
        await outputs_queue.put(outputs.execution_count(self._executions))
        await self._run(code, outputs_queue)

    async def quietly(self, code: str) -> None:
        await self._run(code, None)

    async def _run(self, code: str, queue: OutputQueue | None) -> None:
        assert self._streams is not None and self._writer is not None
        execution_id = str(next(self._ids))
        replies = self._replies[execution_id] = asyncio.Queue()
        self._streams.begin(execution_id, queue)
        self._running = execution_id
        try:
            self._writer.write(json.dumps({"id": execution_id, "code": code}).encode() + b"\n")
            await self._writer.drain()
            while (reply := await replies.get())["type"] != "done":
                if reply["type"] == "exited":
                    raise KernelFailed("the JavaScript kernel exited")
                if queue is not None and (output := _output(reply)) is not None:
                    await queue.put(output)
            await self._streams.ended()
            self._running = ""
        finally:
            self._replies.pop(execution_id, None)

    async def interrupt(self) -> None:
        if self._process is None or self._process.returncode is not None or not self._running:
            return
        interrupted = self._running
        done = self._replies[interrupted] = asyncio.Queue()
        self._process.send_signal(signal.SIGINT)
        try:
            async with asyncio.timeout(INTERRUPT_GRACE_S):
                while (await done.get())["type"] not in ("done", "exited"):
                    pass
            if self._process.returncode is None:
                self._running = ""
                return
        except TimeoutError:
            pass
        finally:
            self._replies.pop(interrupted, None)
        log.warning("JavaScript cell did not stop: context restarted")
        await self.restart()

    async def restart(self) -> None:
        await self.stop()
        self._ids = itertools.count(1)
        self._executions = 0
        self._running = ""
        await self.start()

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._receiving is not None:
            self._receiving.cancel()
        if self._process is not None and self._process.returncode is None:
            self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        if self._streams is not None:
            await self._streams.close()

    def env_code(self, values: Mapping[str, str], removed: Sequence[str]) -> str:
        sets = [f"process.env[{json.dumps(k)}] = {json.dumps(v)};" for k, v in values.items()]
        return " ".join(sets + [f"delete process.env[{json.dumps(k)}];" for k in removed])

    def reseed_code(self) -> str:
        # V8's Math.random cannot be reseeded from JavaScript; crypto draws from the kernel.
        return "undefined"


def _output(reply: Mapping[str, Any]) -> outputs.Output | None:
    if reply["type"] == "result":
        return outputs.result({"text/plain": reply.get("text", "")}, main=True)
    if reply["type"] == "error":
        return outputs.error(str(reply.get("name", "Error")), str(reply.get("value", "")),
                             str(reply.get("traceback", "")))
    return None
