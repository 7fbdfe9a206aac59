"""A sandbox's streams in flight end when it ends (e2b-compat parity), through the whole platform.

E2B cuts a sandbox's connections when it is killed, expires, is paused or its VM dies: its proxy
ends a Connect stream with an `unavailable` end-of-stream (between two envelopes; any other body
is broken off), the SDK probes `/health`, is answered "not found" and raises
SandboxNotRunningException ("... killed or reached its end of life while the request was in
flight"). Here the same holds for every kind of stream the SDK opens (a command's output, a
connected command, a PTY, a directory watch, a download and an upload) and for a guest app's HTTP
stream and WebSocket reached through `get_host`: each ends within END_WITHIN_S of the kill, the
pause, the expiry, or the QEMU behind the sandbox being SIGKILLed (the platform notices the exit
and reports the sandbox lost). Measured here: 0.03-0.12 s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import websockets
from e2b import AsyncSandbox, PtySize, Sandbox
from e2b.exceptions import SandboxNotFoundException, SandboxNotRunningException

from aenv_cli.platform import Platform

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

IN_FLIGHT = "was killed or reached its end of life while the request was in flight"
END_WITHIN_S = 2.0
STREAM_PORT = 8081
WS_PORT = 8080
WS_SERVER = Path(__file__).parent / "guest" / "app_server.py"
# A chunked response that never ends (stdlib only, as the guest has it).
STREAM_SERVER = """
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            self.wfile.write(b"5\\r\\ntick\\n\\r\\n")
            self.wfile.flush()
            time.sleep(0.2)
ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""


def qemu_of(platform: Platform, sandbox_id: str) -> int:
    """The pid of the QEMU running the sandbox, from the pidfile in its directory of the node
    agent's state (its command line may name the warm pool's directory it was started in)."""
    pidfiles = list(platform.home.glob(f"**/sandboxes/{sandbox_id}/vm/qemu.pid"))
    assert len(pidfiles) == 1, pidfiles
    pid = int(pidfiles[0].read_text().strip())
    assert b"qemu-system" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return pid


Ending = Callable[[Sandbox, Platform], None]


def crash(sbx: Sandbox, platform: Platform) -> None:
    os.kill(qemu_of(platform, sbx.sandbox_id), signal.SIGKILL)


def kill(sbx: Sandbox, platform: Platform) -> None:
    assert sbx.kill() is True


def pause(sbx: Sandbox, platform: Platform) -> None:
    assert sbx.pause() is True


ENDINGS: dict[str, Ending] = {"kill": kill, "pause": pause, "crash": crash}


def ends_when(sbx: Sandbox, platform: Platform, ending: Ending, call: Callable[[], object],
              expected: type[BaseException] = SandboxNotRunningException,
              later_s: float = 0.0) -> BaseException:
    """`call` (in a thread) is pending while the sandbox runs, and raises `expected` within
    END_WITHIN_S of `ending` beginning (plus `later_s` for an ending that comes later)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(call)
        time.sleep(1.0)
        assert not pending.done(), pending
        began = time.monotonic()
        ending(sbx, platform)
        with pytest.raises(expected) as raised:
            pending.result(timeout=60)
        took = time.monotonic() - began
    assert took < END_WITHIN_S + later_s, f"ended {took:.2f}s after the sandbox"
    return raised.value


def assert_reported_gone(sbx: Sandbox) -> None:
    """The health probe (and so every later request) says the sandbox does not run."""
    assert sbx.is_running() is False


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_background_command_s_wait(
    fresh_sbx: Sandbox, platform: Platform, ending: str
) -> None:
    handle = fresh_sbx.commands.run("sleep 60", background=True)
    error = ends_when(fresh_sbx, platform, ENDINGS[ending], handle.wait)
    assert IN_FLIGHT in str(error)
    assert_reported_gone(fresh_sbx)
    if ending == "crash":
        # The death is certified before the streams are cut: the stream's end names the cause.
        assert f"sandbox {fresh_sbx.sandbox_id} died: vmm_crash (qemu killed by signal 9)" in (
            str(error))
        # Reported lost: neither listed nor found, and nothing of it is left running. The
        # streams end as the node removes the sandbox, so the record may be gone a moment
        # after the SDK raised.
        deadline = time.monotonic() + 10
        with pytest.raises(SandboxNotFoundException):
            while time.monotonic() < deadline:
                Sandbox.get_info(fresh_sbx.sandbox_id)
                time.sleep(0.1)
        # The list is served from the gateway's mirror of etcd, which learns of the removal
        # through its watch: a moment after the owner's answer, under load.
        deadline = time.monotonic() + 5
        while fresh_sbx.sandbox_id in {s.sandbox_id for s in Sandbox.list().next_items()}:
            assert time.monotonic() < deadline, "still listed 5 s after it was not found"
            time.sleep(0.1)
        assert fresh_sbx.kill() is False


def test_kill_sandbox_while_command_is_running(fresh_sbx: Sandbox) -> None:
    """The official suite's test (sync): the kill comes before `wait` reads the stream, which
    then ends with the proxy's `unavailable` end-of-stream (not a broken body), and the SDK's
    probe makes it "killed or reached its end of life"."""
    cmd = fresh_sbx.commands.run("sleep 60", background=True)
    fresh_sbx.kill()
    with pytest.raises(SandboxNotRunningException) as raised:
        cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(raised.value)
    assert f"the connection to sandbox {fresh_sbx.sandbox_id} ended before the stream" in str(
        raised.value)


@pytest.mark.asyncio(loop_scope="session")
async def test_kill_sandbox_while_command_is_running_async(e2b_vars: dict[str, str]) -> None:
    sbx = await AsyncSandbox.create(timeout=300)
    try:
        cmd = await sbx.commands.run("sleep 60", background=True)
        await sbx.kill()
        with pytest.raises(SandboxNotRunningException) as raised:
            await cmd.wait()
        assert "sandbox was killed or reached its end of life" in str(raised.value)
    finally:
        await sbx.kill()


def test_a_command_s_wait_when_the_sandbox_expires(
    fresh_sbx: Sandbox, platform: Platform
) -> None:
    handle = fresh_sbx.commands.run("sleep 60", background=True)

    def expire(sbx: Sandbox, platform: Platform) -> None:
        sbx.set_timeout(1)

    # Its end comes a second later, and the expiry pass runs every second.
    error = ends_when(fresh_sbx, platform, expire, handle.wait, later_s=2.0)
    assert IN_FLIGHT in str(error)
    # The streams end as the expiry's kill begins; the kill itself takes a moment more.
    deadline = time.monotonic() + 30
    while fresh_sbx.sandbox_id in {s.sandbox_id for s in Sandbox.list().next_items()}:
        assert time.monotonic() < deadline, "the expired sandbox is still listed"
        time.sleep(0.2)


def test_a_connected_command(fresh_sbx: Sandbox, platform: Platform) -> None:
    started = fresh_sbx.commands.run("sleep 60", background=True)
    connected = fresh_sbx.commands.connect(started.pid)
    assert IN_FLIGHT in str(ends_when(fresh_sbx, platform, kill, connected.wait))


def test_a_pty(fresh_sbx: Sandbox, platform: Platform) -> None:
    pty = fresh_sbx.pty.create(PtySize(rows=24, cols=80))
    assert IN_FLIGHT in str(ends_when(fresh_sbx, platform, kill, pty.wait))


def test_a_download_in_flight(fresh_sbx: Sandbox, platform: Platform) -> None:
    fresh_sbx.commands.run("truncate -s 4G /tmp/big")  # sparse: takes no room
    read = lambda: fresh_sbx.files.read("/tmp/big", format="bytes")  # noqa: E731
    assert IN_FLIGHT in str(ends_when(fresh_sbx, platform, kill, read))


def test_an_upload_in_flight(fresh_sbx: Sandbox, platform: Platform) -> None:
    def body() -> Iterator[bytes]:
        while True:  # endless: only the kill ends the upload
            yield b"x" * 65536
            time.sleep(0.01)

    # A 502 "not found" mid-upload, or the connection dropped and then the probe.
    ends_when(fresh_sbx, platform, kill, lambda: fresh_sbx.files.write("/tmp/up", body()))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_directory_watch(e2b_vars: dict[str, str]) -> None:
    sbx = await AsyncSandbox.create(timeout=300)
    try:
        exits: asyncio.Queue[Exception | None] = asyncio.Queue()
        await sbx.files.watch_dir("/tmp", on_event=lambda _: None, on_exit=exits.put_nowait)
        await asyncio.sleep(1.0)
        assert exits.empty()
        began = time.monotonic()
        await sbx.kill()
        error = await asyncio.wait_for(exits.get(), 60)
        assert time.monotonic() - began < END_WITHIN_S
        assert isinstance(error, SandboxNotRunningException) and IN_FLIGHT in str(error)
    finally:
        await sbx.kill()


def _serve(sbx: Sandbox, platform: Platform) -> None:
    """The endless stream on STREAM_PORT and the WebSocket echo on WS_PORT, up."""
    sbx.files.write("/home/user/stream_server.py", STREAM_SERVER)
    sbx.files.write("/home/user/app_server.py", WS_SERVER.read_text())
    sbx.commands.run(f"python3 /home/user/stream_server.py {STREAM_PORT}", background=True,
                     timeout=0)
    sbx.commands.run(f"python3 /home/user/app_server.py {WS_PORT}", background=True, timeout=0)
    deadline = time.monotonic() + 60
    for port in (STREAM_PORT, WS_PORT):
        while _status(platform, sbx.get_host(port)) == 502:
            assert time.monotonic() < deadline, f"guest port {port} did not come up"
            time.sleep(0.5)


def _status(platform: Platform, host: str) -> int:
    # Only the status: the stream's body never ends.
    with httpx.stream("GET", f"{platform.sandbox_url}/", headers={"Host": host},
                      timeout=5) as response:
        return response.status_code


@pytest.mark.parametrize("ending", ["kill", "crash"])
def test_an_app_port_http_stream(fresh_sbx: Sandbox, platform: Platform, ending: str) -> None:
    _serve(fresh_sbx, platform)
    headers = {"Host": fresh_sbx.get_host(STREAM_PORT)}
    with httpx.stream("GET", f"{platform.sandbox_url}/", headers=headers,
                      timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines) == "tick"

        def read_all() -> None:
            for _ in lines:
                pass

        ends_when(fresh_sbx, platform, ENDINGS[ending], read_all, httpx.RemoteProtocolError)
    gone = httpx.get(f"{platform.sandbox_url}/", headers=headers, timeout=10)
    assert gone.status_code == 502 and "was not found" in gone.json()["message"]


@pytest.mark.asyncio(loop_scope="session")
async def test_an_app_port_websocket(fresh_sbx: Sandbox, platform: Platform) -> None:
    await asyncio.to_thread(_serve, fresh_sbx, platform)
    parts = urlsplit(platform.sandbox_url)
    assert parts.hostname and parts.port
    sock = socket.create_connection((parts.hostname, parts.port))
    uri = f"ws://{fresh_sbx.get_host(WS_PORT)}:{parts.port}/ws"
    async with websockets.connect(uri, sock=sock) as conn:
        await conn.send("one")
        assert await conn.recv() == "echo:one"
        pending = asyncio.ensure_future(conn.recv())
        await asyncio.sleep(1.0)
        assert not pending.done()
        began = time.monotonic()
        await asyncio.to_thread(kill, fresh_sbx, platform)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(pending, 60)
        assert time.monotonic() - began < END_WITHIN_S
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
