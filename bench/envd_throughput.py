"""envd data paths through the whole platform (official e2b SDK → gateway → node proxy → envd),
beside floors measured in the same run and the same sandbox.

- command output: `commands.run` of a producer writing SIZE bytes to stdout (`yes … | head -c`,
  every byte checked; and `head -c /dev/urandom`), delivered as Connect stream frames;
- uploads: `files.write` of SIZE random bytes as multipart (bytes) and octet-stream (file object),
  checked by sha256 in the guest; download: `files.read(format="bytes")`, compared byte for byte;
- floors: the same producers timed inside the guest into /dev/null (what the guest CPU can make
  at all), and a raw transfer of SIZE bytes each way between this process and a bare socket
  server in the guest, over the same gateway → node proxy → netns path (no envd).

Under TCG (these machines) one emulated vCPU runs the producer, envd and the guest's network
stack, so the guest floors bound every platform figure.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from _platform import running_platform
from _stats import emit
from e2b import Sandbox

from aenv_cli.platform import Platform
from aenv_nodeagent.vmm import detect_accelerator

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SIZE = int(os.environ.get("BENCH_MIB", "32")) * 2**20
RAW_PORT = 8123
YES = "yes abcdefghijklmnop"

# Minimal HTTP/1.1 over a bare socket: GET streams SIZE bytes in 1 MiB sends, POST swallows the
# body. Started with the guest's own python3; nothing in it is envd.
RAW_SERVER = textwrap.dedent("""
    import socket, sys
    block = bytes(1 << 20)
    OK = b"HTTP/1.1 200 OK\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n"
    srv = socket.create_server(("0.0.0.0", int(sys.argv[1])), reuse_port=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            head = b""
            while b"\\r\\n\\r\\n" not in head:
                head += conn.recv(65536)
            head, _, body = head.partition(b"\\r\\n\\r\\n")
            lines = head.decode("latin-1").split("\\r\\n")
            fields = dict(l.lower().split(": ", 1) for l in lines[1:] if ": " in l)
            if lines[0].startswith("POST"):
                left = int(fields["content-length"]) - len(body)
                buf = bytearray(1 << 20)
                while left > 0:
                    left -= conn.recv_into(buf)
                conn.sendall(OK % 0)
            else:
                size = int(lines[0].split()[1].lstrip("/"))
                conn.sendall(OK % size)
                while size > 0:
                    size -= conn.send(block[: min(size, len(block))])
""")


Rates = dict[str, float]
Group = dict[str, Rates]


def mb_per_s(samples_s: list[float]) -> Rates:
    rates = sorted(SIZE / s / 1e6 for s in samples_s)
    return {"n": len(rates), "p50_mb_s": round(statistics.median(rates), 2),
            "min_mb_s": round(rates[0], 2), "max_mb_s": round(rates[-1], 2)}


def timed(action: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def guest_seconds(sbx: Sandbox, command: str) -> float:
    """Wall time of `command` measured by the guest's own clock (no envd or network in it)."""
    out = sbx.commands.run(f"a=$(date +%s%N); {command}; b=$(date +%s%N); echo $((b-a))")
    return int(out.stdout.split()[-1]) / 1e9


def command_output(sbx: Sandbox) -> Group:
    def yes_run() -> None:
        result = sbx.commands.run(f"{YES} | head -c {SIZE}", timeout=600)
        assert len(result.stdout) == SIZE, len(result.stdout)

    def urandom_run() -> None:
        # Random bytes decode to U+FFFD here and there: only the exit is checked.
        chunks: list[str] = []
        result = sbx.commands.run(f"head -c {SIZE} /dev/urandom", on_stdout=chunks.append,
                                  timeout=600)
        assert result.exit_code == 0 and chunks

    return {
        "yes": mb_per_s(timed(yes_run)),
        "urandom": mb_per_s(timed(urandom_run)),
    }


def files(sbx: Sandbox) -> Group:
    data = os.urandom(SIZE)
    digest = hashlib.sha256(data).hexdigest()
    path = "/tmp/bench-upload.bin"

    def verify(target: str) -> None:
        assert sbx.commands.run(f"sha256sum {target}").stdout.split()[0] == digest

    multipart = timed(lambda: sbx.files.write(path, data))
    verify(path)
    octet = timed(lambda: sbx.files.write(path + ".octet", io.BytesIO(data)))
    verify(path + ".octet")

    def download() -> None:
        assert sbx.files.read(path, format="bytes") == data

    return {"upload_multipart": mb_per_s(multipart), "upload_octet_stream": mb_per_s(octet),
            "download": mb_per_s(timed(download))}


def floors(sbx: Sandbox, sandbox_url: str) -> Group:
    produce_yes = [guest_seconds(sbx, f"{YES} | head -c {SIZE} > /dev/null")
                   for _ in range(ROUNDS)]
    produce_urandom = [guest_seconds(sbx, f"head -c {SIZE} /dev/urandom > /dev/null")
                       for _ in range(ROUNDS)]
    sbx.files.write("/tmp/raw_server.py", RAW_SERVER)
    server = sbx.commands.run(f"python3 /tmp/raw_server.py {RAW_PORT}", background=True,
                              timeout=0)
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": str(RAW_PORT)}
    try:
        with httpx.Client(base_url=sandbox_url, headers=headers, timeout=600) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/1").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "raw guest server did not come up"
                time.sleep(0.5)

            def down() -> None:
                total = 0
                with client.stream("GET", f"/{SIZE}") as response:
                    for chunk in response.iter_raw(1 << 20):
                        total += len(chunk)
                assert total == SIZE

            payload = os.urandom(SIZE)

            def up() -> None:
                assert client.post("/", content=payload).status_code == 200

            raw_down, raw_up = timed(down), timed(up)
    finally:
        server.kill()
    return {
        "guest_produce_yes_to_devnull": mb_per_s(produce_yes),
        "guest_produce_urandom_to_devnull": mb_per_s(produce_urandom),
        "raw_http_guest_to_client": mb_per_s(raw_down),
        "raw_http_client_to_guest": mb_per_s(raw_up),
    }


def measure(plat: Platform) -> dict[str, Group]:
    os.environ.update(plat.e2b_env())
    sbx = Sandbox.create(timeout=1800)
    try:
        return {"command_output": command_output(sbx), "files": files(sbx),
                "floor": floors(sbx, plat.sandbox_url)}
    finally:
        sbx.kill()


def ratio(result: Group, floor: Group, a: str, b: str) -> float:
    return round(result[a]["p50_mb_s"] / floor[b]["p50_mb_s"], 3)


async def main() -> None:
    async with running_platform("abenv", "10.219.0.0/20") as plat:
        result = await asyncio.to_thread(measure, plat)
    out, fil, floor = result["command_output"], result["files"], result["floor"]
    emit("envd_throughput", {
        "rounds": ROUNDS,
        "size_mib": SIZE // 2**20,
        "accelerator": str(detect_accelerator(None).accel),
        **result,
        "ratio_p50_over_floor": {
            "output_yes_over_guest_produce": ratio(out, floor, "yes",
                                                   "guest_produce_yes_to_devnull"),
            "output_urandom_over_guest_produce": ratio(out, floor, "urandom",
                                                       "guest_produce_urandom_to_devnull"),
            "upload_multipart_over_raw": ratio(fil, floor, "upload_multipart",
                                               "raw_http_client_to_guest"),
            "upload_octet_over_raw": ratio(fil, floor, "upload_octet_stream",
                                           "raw_http_client_to_guest"),
            "download_over_raw": ratio(fil, floor, "download", "raw_http_guest_to_client"),
        },
    })


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
