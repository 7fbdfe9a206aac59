"""Talking to a sandbox's envd from tests: run a shell command (Connect JSON), read its output."""

from __future__ import annotations

import base64
import json
import struct

import aiohttp

ENVD_PORT = 49983
# A counter that lives only in the shell's memory; each tick adds the step read from a file (so a
# test can make forked children diverge) and publishes the value. Few programs per tick: under TCG
# every exec costs, and a fork test runs 17 guests on 2 cores.
COUNTER = (
    "setsid sh -c 'i=0; while :; do read s < /tmp/step; i=$((i+s)); echo $$ $i > /tmp/count.tmp; "
    "mv /tmp/count.tmp /tmp/count; sleep 1; done' </dev/null >/dev/null 2>&1 &"
)


def _envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


def _frames(body: bytes) -> list[dict[str, object]]:
    out, pos = [], 0
    while pos + 5 <= len(body):
        _, size = struct.unpack(">BI", body[pos:pos + 5])
        out.append(json.loads(body[pos + 5:pos + 5 + size] or b"{}"))
        pos += 5 + size
    return out


async def sh(
    session: aiohttp.ClientSession, host: str, token: str, script: str,
    *, user: str | None = "root", timeout_s: float = 60.0,
) -> str:
    """Run `sh -c script` as `user` (envd takes it from Basic auth, as the E2B SDKs send it;
    None: the guest's default user); return its stdout; fail on a non-zero exit."""
    request = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    headers = {"content-type": "application/connect+json", "X-Access-Token": token}
    if user is not None:
        headers["authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
    async with session.post(
        f"http://{host}:{ENVD_PORT}/process.Process/Start", data=_envelope(request),
        headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        body = await resp.read()
    assert resp.status == 200, body
    stdout, end = b"", None
    for frame in _frames(body):
        event = frame.get("event")
        if isinstance(event, dict):
            data = event.get("data")
            if isinstance(data, dict) and "stdout" in data:
                stdout += base64.b64decode(str(data["stdout"]))
            if "end" in event:
                end = event["end"]
    assert isinstance(end, dict) and end.get("exitCode", 0) == 0, (script, body[-400:])
    return stdout.decode()


async def counter(session: aiohttp.ClientSession, host: str, token: str) -> tuple[int, int]:
    """(pid, value) of the running counter."""
    pid, value = (await sh(session, host, token, "cat /tmp/count")).split()
    return int(pid), int(value)


async def start_counter(session: aiohttp.ClientSession, host: str, token: str) -> None:
    await sh(session, host, token, f"echo 1 > /tmp/step; {COUNTER} "
             "for _ in $(seq 300); do [ -f /tmp/count ] && break; sleep 0.1; done; cat /tmp/count")
