"""A real server (`python -m aenv_codeinterp`) with real kernels (ipykernel, Node.js, bash)
beside a fake envd serving `/envs`; driven with httpx and read with the SDK's own parser."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b_code_interpreter.models import Execution, parse_output

START_WITHIN_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeEnvd:
    """`GET /envs` answering `variables`; `tokens` records the access tokens it was sent."""

    def __init__(self) -> None:
        self.variables: dict[str, str] = {}
        self.tokens: list[str | None] = []
        envd = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                envd.tokens.append(self.headers.get("X-Access-Token"))
                body = json.dumps(envd.variables).encode()
                self.send_response(200 if self.path == "/envs" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Server:
    def __init__(self, url: str, envd: FakeEnvd, cwd: Path) -> None:
        self.url, self.envd, self.cwd = url, envd, cwd

    def run(self, code: str, timeout: float = 60, **fields: Any) -> Execution:
        execution = Execution()
        with httpx.stream("POST", f"{self.url}/execute", json={"code": code, **fields},
                          headers={"X-Access-Token": "tok"}, timeout=timeout) as response:
            assert response.status_code == 200, response.read()
            lines = list(response.iter_lines())
        assert json.loads(lines[-1]) == {"type": "end_of_execution"}
        for line in lines[:-1]:
            parse_output(execution, line)
        return execution

    def post(self, path: str, **body: Any) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, timeout=60)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    envd = FakeEnvd()
    cwd = tmp_path_factory.mktemp("home")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "aenv_codeinterp", "--host", "127.0.0.1", "--port", str(port),
         "--cwd", str(cwd), "--envd-port", str(envd.port),
         "--envd-init-marker", str(cwd / "no-init-marker")],
        stdout=subprocess.DEVNULL, stderr=open(cwd / "server.log", "w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_WITHIN_S
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, \
                (cwd / "server.log").read_text()
            time.sleep(0.2)
        yield Server(url, envd, cwd)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        envd.close()
