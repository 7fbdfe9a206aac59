"""Gateway data-plane overhead: p50 latency per request and throughput through the gateway vs
direct to the same upstream vs Debian nginx proxying it. Prints JSON.

Chain measured: client -> gateway (header routing, directory lookup) -> node proxy (the shared
StreamingProxy, as the node agent runs it) -> upstream. nginx stands in for the two proxy hops
with one hop, so "gateway" is compared with both "direct" and "nginx".

Run: .venv/bin/python bench/gateway_proxy.py [--requests 2000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# The gateway tests' upstream server and minimal node proxy are the bench's fixtures too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "services" / "gateway"))
from tests.upstreams import MiniNodeProxy, serve

from aenv.cluster.v1 import cluster_pb2
from aenv_gateway.cluster.directory import InMemoryClusterView
from aenv_gateway.config import GatewaySettings
from aenv_testing.ports import free_port

SANDBOX = "benchsandbox0001"


async def _hello(_: Request) -> Response:
    return Response(b"hello", media_type="text/plain")


@contextlib.contextmanager
def nginx(upstream_port: int) -> Iterator[int]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "nginx.conf"
        conf.write_text(f"""
daemon off; worker_processes 1; pid {tmp}/nginx.pid; error_log {tmp}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off;
  client_body_temp_path {tmp}; proxy_temp_path {tmp}; fastcgi_temp_path {tmp};
  uwsgi_temp_path {tmp}; scgi_temp_path {tmp};
  upstream up {{ server 127.0.0.1:{upstream_port}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port};
    location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; proxy_request_buffering off; }} }} }}
""")
        proc = subprocess.Popen([binary, "-c", str(conf), "-p", tmp], stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.1),
                ):
                    break
                time.sleep(0.05)
            yield port
        finally:
            proc.send_signal(signal.SIGQUIT)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _latency_p50(url: str, headers: dict[str, str], n: int) -> float:
    async with aiohttp.ClientSession() as session:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            async with session.get(url, headers=headers) as r:
                await r.read()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples[n // 10 :]) * 1000


def _throughput(url: str, headers: dict[str, str], n: int, concurrency: int) -> float:
    """Load from a separate process (wrk if present) so the client does not share our loop."""
    wrk = shutil.which("wrk")
    if wrk:
        args = [wrk, "-t1", f"-c{concurrency}", "-d5s", "--latency"]
        for k, v in headers.items():
            args += ["-H", f"{k}: {v}"]
        out = subprocess.run([*args, url], capture_output=True, text=True, check=True).stdout
        line = next(x for x in out.splitlines() if x.startswith("Requests/sec:"))
        return float(line.split()[1])
    code = (
        "import asyncio,aiohttp,time,sys\n"
        "async def main(url,h,n,c):\n"
        " async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as s:\n"
        "  async def one():\n"
        "   async with s.get(url,headers=h) as r: await r.read()\n"
        "  q=iter(range(n)); t=time.perf_counter()\n"
        "  async def worker():\n"
        "   for _ in q: await one()\n"
        "  await asyncio.gather(*[worker() for _ in range(c)])\n"
        "  print(n/(time.perf_counter()-t))\n"
        f"asyncio.run(main({url!r},{headers!r},{n},{concurrency}))\n"
    )
    return float(
        subprocess.run(
            ["python3" if not os.environ.get("VIRTUAL_ENV") else "python", "-c", code],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


async def run(requests: int, concurrency: int) -> dict[str, object]:
    from aenv_gateway.core.templates.records import InMemoryTemplateRecords
    from aenv_gateway.server import start_gateway

    async with contextlib.AsyncExitStack() as stack:
        upstream_port = await stack.enter_async_context(
            serve(Starlette(routes=[Route("/hello", _hello)]))
        )
        session = await stack.enter_async_context(aiohttp.ClientSession(auto_decompress=False))
        node_proxy_port = await stack.enter_async_context(serve(MiniNodeProxy(session)))
        view = InMemoryClusterView()
        view.node_records["n"] = cluster_pb2.NodeRecord(
            node_id="n",
            nodeagent_address="127.0.0.1:1",
            proxy_address=f"127.0.0.1:{node_proxy_port}",
        )
        view.sandbox_records[SANDBOX] = cluster_pb2.SandboxRecord(
            sandbox_id=SANDBOX, node_id="n", state=cluster_pb2.SANDBOX_STATE_RUNNING
        )
        gateway = await start_gateway(
            GatewaySettings(listen="127.0.0.1:0", grpc_listen="127.0.0.1:0"), view,
            InMemoryTemplateRecords(), "e2b_bench",
        )
        stack.push_async_callback(gateway.stop)
        nginx_port = stack.enter_context(nginx(upstream_port))
        routed = {"E2b-Sandbox-Id": SANDBOX, "E2b-Sandbox-Port": str(upstream_port)}
        targets = {
            "direct": (f"http://127.0.0.1:{upstream_port}/hello", {}),
            "nginx": (f"http://127.0.0.1:{nginx_port}/hello", {}),
            "gateway": (f"http://127.0.0.1:{gateway.http_port}/hello", routed),
        }
        measured: dict[str, dict[str, float]] = {}
        for name, (url, headers) in targets.items():
            p50 = await _latency_p50(url, headers, requests)
            rps = await asyncio.to_thread(_throughput, url, headers, requests * 2, concurrency)
            measured[name] = {"p50_ms": round(p50, 3), "rps": round(rps, 1)}
        direct = measured["direct"]["p50_ms"]
        result: dict[str, object] = {"requests": requests, "concurrency": concurrency, **measured}
        result["gateway_overhead_p50_ms"] = round(measured["gateway"]["p50_ms"] - direct, 3)
        result["nginx_overhead_p50_ms"] = round(measured["nginx"]["p50_ms"] - direct, 3)
        result["gateway_vs_nginx_throughput"] = round(
            measured["gateway"]["rps"] / measured["nginx"]["rps"], 3
        )
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.requests, args.concurrency)), indent=2))


if __name__ == "__main__":
    main()
