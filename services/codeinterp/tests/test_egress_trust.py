"""A JavaScript context started before the sandbox's /init named its CA bundle still trusts it.

The template warms its contexts before any sandbox exists, under `sudo` (no CA variables); a
sandbox's /init then installs the cluster's egress CA and its variables, which reach a context
at its next cell (contexts.py's catch-up). Node's own CA list is fixed at start, so the kernel
reads OpenSSL's store instead, where SSL_CERT_FILE counts at the first TLS connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aenv_codeinterp.kernel import OutputQueue
from aenv_codeinterp.nodejs import NodeKernel
from aenv_nodeagent.egress.certs import EgressCA, server_context


@pytest.fixture
async def origin() -> AsyncIterator[tuple[EgressCA, int]]:
    """An HTTPS server on loopback whose certificate for `localhost` a fresh CA issued."""
    ca = EgressCA.generate()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0,
                                        ssl=server_context(ca.mint("localhost")))
    try:
        yield ca, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def _stdout(kernel: NodeKernel, code: str) -> str:
    queue: OutputQueue = asyncio.Queue()
    await kernel.execute(code, queue)
    printed = []
    while not queue.empty():
        output = queue.get_nowait()
        if output.get("type") == "stdout":
            printed.append(str(output["text"]))
    return "".join(printed)


async def test_a_warm_javascript_context_trusts_the_ca_its_sandbox_names_later(
    origin: tuple[EgressCA, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca, port = origin
    for name in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)  # as sudo leaves the template's server
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(ca.cert_pem)
    kernel = NodeKernel(str(tmp_path))
    await kernel.start()
    try:
        assert await _stdout(kernel, "console.log('warm')") == "warm\n"
        catch_up = kernel.env_code({"SSL_CERT_FILE": str(bundle)}, [])
        fetched = await _stdout(kernel, catch_up + "\n" + (
            f"const r = await fetch('https://localhost:{port}/').catch(e => e.cause)\n"
            "console.log(r.status || r.code)"))
    finally:
        await kernel.stop()
    assert fetched == "200\n"
