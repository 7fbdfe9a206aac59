"""Commands in a guest, through its envd's Process API (Connect protocol, binary protobuf), as
the E2B SDKs run them: `sh -c <command>` as a user (Basic auth `user:`), with env vars and a
working directory; and files uploaded to it (POST /files).

    commands = GuestCommands(session)
    result = await commands.run(host, "pip install -r requirements.txt", user="root")
    result.exit_code, result.output_tail()
    pid = await commands.start(host, "python app.py")   # keeps running after we go

Template builds use it for their RUN steps, start command and ready checks.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from aenv_common.errors import DeadlineExceeded, Internal, Unavailable
from aenv_nodeagent.envd_client import ENVD_PORT
from envd.process import process_pb2 as pb

_START = "/process.Process/Start"
_END_STREAM = 0x02
# What a failure reason quotes of a command's output: its last lines, not megabytes.
TAIL_BYTES = 2048
UPLOAD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: bytes
    stderr: bytes

    def output_tail(self) -> str:
        """The end of what it printed (stderr, else stdout), for a one-line failure reason."""
        text = (self.stderr or self.stdout)[-TAIL_BYTES:].decode(errors="replace").strip()
        return text.splitlines()[-1] if text else ""


@dataclass(frozen=True)
class CommandSpec:
    command: str
    user: str = "root"
    envs: Mapping[str, str] | None = None
    cwd: str | None = None


class GuestCommands:
    def __init__(self, session: aiohttp.ClientSession, port: int = ENVD_PORT) -> None:
        self._session = session
        self._port = port

    async def run(
        self, host: str, spec: CommandSpec, *, timeout_s: float, token: str = ""
    ) -> CommandResult:
        """Runs the command to its end.

        :raise DeadlineExceeded: it ran past `timeout_s` (envd kills it).
        :raise Unavailable: envd could not be reached or broke off the stream.
        """
        stdout, stderr = bytearray(), bytearray()
        async for event in self._events(host, spec, token, timeout_s):
            which = event.WhichOneof("event")
            if which == "data":
                (stdout if event.data.WhichOneof("output") == "stdout" else stderr).extend(
                    event.data.stdout or event.data.stderr)
            elif which == "end":
                return CommandResult(event.end.exit_code, bytes(stdout), bytes(stderr))
        raise Unavailable(f"envd ended `{spec.command}` without its exit status")

    async def start(self, host: str, spec: CommandSpec, *, token: str = "") -> int:
        """Starts the command and returns its pid once envd has; it keeps running when our
        stream closes (envd ties no process to its caller's connection).

        :raise Unavailable: envd could not be reached or did not start it.
        """
        async for event in self._events(host, spec, token, None):
            if event.WhichOneof("event") == "start":
                return event.start.pid
        raise Unavailable(f"envd did not start `{spec.command}`")

    async def upload(
        self, host: str, source: Path, path: str, *, user: str = "root", token: str = ""
    ) -> None:
        """Streams a host file to `path` in the guest (envd's POST /files, octet-stream).

        :raise Unavailable: envd could not be reached or refused the upload.
        """
        headers = {"content-type": "application/octet-stream"}
        if token:
            headers["x-access-token"] = token
        url = f"http://{host}:{self._port}/files"
        try:
            with source.open("rb") as body:
                async with self._session.post(
                    url, params={"path": path, "username": user}, data=body, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=UPLOAD_TIMEOUT_S),
                ) as resp:
                    if resp.status != 200:
                        raise Unavailable(
                            f"envd refused the upload to {path}: HTTP {resp.status} "
                            f"{(await resp.text())[:200]}")
        except (aiohttp.ClientError, TimeoutError) as err:
            raise Unavailable(f"upload to {path} broke off: {type(err).__name__}") from err

    async def _events(
        self, host: str, spec: CommandSpec, token: str, timeout_s: float | None
    ) -> AsyncIterator[pb.ProcessEvent]:
        request = pb.StartRequest(
            process=pb.ProcessConfig(cmd="/bin/sh", args=["-c", spec.command],
                                     envs=dict(spec.envs or {}), cwd=spec.cwd),
            stdin=False,
        )
        headers = {
            "content-type": "application/connect+proto",
            "authorization": "Basic " + base64.b64encode(f"{spec.user}:".encode()).decode(),
        }
        if token:
            headers["x-access-token"] = token
        if timeout_s is not None:
            headers["connect-timeout-ms"] = str(int(timeout_s * 1000))
        url = f"http://{host}:{self._port}{_START}"
        payload = request.SerializeToString()
        try:
            async with self._session.post(
                url, data=struct.pack(">BI", 0, len(payload)) + payload, headers=headers,
                timeout=aiohttp.ClientTimeout(total=None if timeout_s is None else timeout_s + 10),
            ) as resp:
                if resp.status != 200:
                    raise Unavailable(f"envd refused `{spec.command}`: HTTP {resp.status}")
                async for flags, message in _envelopes(resp.content):
                    if flags & _END_STREAM:
                        _raise_end_error(message, spec.command)
                        return
                    yield pb.StartResponse.FromString(message).event
        except (aiohttp.ClientError, TimeoutError) as err:
            raise Unavailable(f"envd broke off `{spec.command}`: {type(err).__name__}") from err


async def _envelopes(stream: aiohttp.StreamReader) -> AsyncIterator[tuple[int, bytes]]:
    while True:
        try:
            head = await stream.readexactly(5)
        except EOFError:  # asyncio.IncompleteReadError: the body ended between messages
            return
        flags, size = struct.unpack(">BI", head)
        yield flags, await stream.readexactly(size)


def _raise_end_error(message: bytes, command: str) -> None:
    """The end-of-stream message carries the RPC's error, if any (Connect's JSON)."""
    end = json.loads(message or b"{}")
    error = end.get("error")
    if not error:
        return
    if error.get("code") == "deadline_exceeded":
        raise DeadlineExceeded(f"`{command}` did not finish in time")
    # E2B's builder's words (its SDK's template suite matches them): the Connect code, then
    # envd's message.
    raise Internal(f"failed to run command '{command}': command failed: "
                   f"{error.get('code', 'unknown')}: {error.get('message', '')}")
