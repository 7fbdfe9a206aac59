"""A guest port listed in `network.httpsPorts` is reached over TLS, its self-signed certificate
not verified (as E2B's proxy does); other ports stay plain HTTP. The upstream is a real TLS server
with a certificate made for the test."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.sandbox_routing import SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER
from aenv_nodeagent.network.slots import NetSlot
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.vmm import QemuVm

BODY = b"served over tls"


class Sandboxes:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def serving(self, sandbox_id: str) -> Sandbox | None:
        return self.sandbox if sandbox_id == self.sandbox.record.sandbox_id else None


def _sandbox(https_ports: list[int]) -> Sandbox:
    slot = NetSlot(index=0, netns="none", host_veth="none", host_ip="127.0.0.1",
                   ns_ip="127.0.0.1")
    record = cluster_pb2.SandboxRecord(
        sandbox_id="sbx1", network=cluster_pb2.NetworkPolicy(https_ports=https_ports))
    return Sandbox(record, slot, cast(QemuVm, object()), Path("/nonexistent"))


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(BODY), BODY))
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        pass  # a plain-HTTP client at the TLS port
    finally:
        writer.close()


@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=guest.invalid", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
async def tls_port(self_signed: tuple[Path, Path]) -> AsyncIterator[int]:
    cert, key = self_signed
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _get(https_ports: list[int], port: int) -> httpx.Response:
    connections = SandboxConnections()
    app = build_proxy_app(Sandboxes(_sandbox(https_ports)), connections)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            return await client.get("/", headers={SANDBOX_ID_HEADER: "sbx1",
                                                  SANDBOX_PORT_HEADER: str(port)}, timeout=10)
    finally:
        await connections.close()


async def test_a_listed_port_is_dialled_over_tls_unverified(tls_port: int) -> None:
    answer = await _get([tls_port], tls_port)
    assert answer.status_code == 200 and answer.content == BODY


async def test_an_unlisted_port_stays_plain_http(tls_port: int) -> None:
    answer = await _get([], tls_port)
    assert answer.status_code == 502  # plain HTTP to a TLS server gets no HTTP answer
