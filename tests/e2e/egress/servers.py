"""The web servers of the test internet, run inside its netns (`python servers.py <config>`).

Every address of the config gets HTTP on port 80 and HTTPS on 443 (certificates of the test's own
CA, one per name the client sends as SNI). Every request is answered and recorded, one JSON line
per request in the log file, so a test asserts on exactly the headers that reached a server:

    GET /echo          -> {"host", "path", "server", "scheme", "headers": [[name, value], ...]}
    GET /bytes/<n>     -> n bytes (the benchmark's download)
    anything else      -> "ok" (recorded, not echoed: a filled secret must not come back to the
                          guest in a body)

UDP port 7 on every address answers each datagram with {"server", "peer"} (what a guest's own
UDP reaches, past the egress process).

The config (JSON): {"addresses": [...], "names": [...], "ca_cert": path, "ca_key": path,
"log": path}. Ready when "ready" is printed on stdout.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from pathlib import Path
from typing import cast

from aiohttp import web

from aenv_nodeagent.egress.certs import EgressCA, LeafContexts

CHUNK = 256 * 1024
UDP_ECHO_PORT = 7


def _tls_context(ca: EgressCA, default_name: str) -> ssl.SSLContext:
    leaves = LeafContexts(ca)
    default = leaves.context_for(default_name)

    def pick(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        if name:
            sock.context = leaves.context_for(name)

    default.sni_callback = pick
    return default


def _app(log: Path) -> web.Application:
    async def record(request: web.Request) -> web.StreamResponse:
        seen = {
            "host": request.host,
            "path": request.path,
            "server": request.transport.get_extra_info("sockname")[0]
            if request.transport else "",
            "scheme": request.scheme,
            "headers": [[k, v] for k, v in request.headers.items()],
        }
        with log.open("a") as out:
            out.write(json.dumps(seen) + "\n")
        if request.path.startswith("/bytes/"):
            return await _download(request, int(request.path.removeprefix("/bytes/")))
        if request.path == "/echo":
            return web.json_response(seen)
        return web.Response(text="ok\n")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    return app


async def _download(request: web.Request, size: int) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    response.content_length = size
    await response.prepare(request)
    block = b"x" * CHUNK
    while size > 0:
        await response.write(block[: min(size, CHUNK)])
        size -= CHUNK
    await response.write_eof()
    return response


class _UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        server = self.transport.get_extra_info("sockname")[0]
        self.transport.sendto(json.dumps({"server": server, "peer": addr[0]}).encode(), addr)


async def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text())
    ca = EgressCA.from_pem(Path(config["ca_cert"]).read_bytes(),
                           Path(config["ca_key"]).read_bytes())
    tls = _tls_context(ca, config["names"][0])
    runner = web.AppRunner(_app(Path(config["log"])), access_log=None, keepalive_timeout=75)
    await runner.setup()
    for address in config["addresses"]:
        await web.TCPSite(runner, address, 80).start()
        await web.TCPSite(runner, address, 443, ssl_context=tls).start()
    for address in config["addresses"]:
        await asyncio.get_running_loop().create_datagram_endpoint(
            _UdpEcho, local_addr=(address, UDP_ECHO_PORT))
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
