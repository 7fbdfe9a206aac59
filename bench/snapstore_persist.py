"""Snapshot persistence throughput through snapstore, beside the raw floor of the same run.

Files: a 256 MiB memory-like file (a quarter of it untouched zero regions, the rest pages of
random, low-entropy and zero content) and a 1 GiB disk-layer-like file (64 KiB extents of random,
low-entropy and zero data, the last fifth a hole). Each is persisted through a real snapstore
process (`python -m aenv_snapstore`) to (a) the filesystem backend and (b) a real moto S3 server.

Floors, same run, same bytes: (a) `cp` of the file to the store's disk plus fsync; (b) raw S3 PUTs
of the file as 2 MiB objects with aiobotocore, 16 in flight (snapstore's own I/O concurrency).

Then 1% of each file's non-zero chunks are changed and the snapshot re-persisted as a child: only
the changed chunks may be sent. Ratios are floor MB/s over snapstore MB/s (target <= 1.5).
Usage: python bench/snapstore_persist.py [--repeats N] [--mem-mib M] [--disk-mib D]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
from _stats import emit
from aiobotocore.session import get_session

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import DEFAULT_CHUNK_SIZE, PushStats, push_files, snapstore_stub

MIB = 1024 * 1024
PAGE = 4096
RAW_S3_CONCURRENCY = 16
S3_KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


# ---- test data -------------------------------------------------------------------------------


def _low_entropy_pages(rng: random.Random, count: int) -> list[bytes]:
    lines = [
        f"{rng.randrange(10**6):06d} INFO worker-{i % 7} handled request ok\n" for i in range(64)
    ]
    return [("".join(rng.choices(lines, k=80)).encode() * 2)[:PAGE] for _ in range(count)]


def write_memory_like(path: Path, size: int, seed: int) -> None:
    """Guest-RAM-like: 25% of 2 MiB regions never touched (zero); touched regions hold 10% zero
    pages, 45% random pages (heap, caches of compressed data), 45% low-entropy pages."""
    rng = random.Random(seed)
    pool = _low_entropy_pages(rng, 256)
    zero = bytes(PAGE)
    with open(path, "wb") as f:
        f.truncate(size)
        for region in range(0, size, 2 * MIB):
            if rng.random() < 0.25:
                continue
            pages = []
            for _ in range(min(2 * MIB, size - region) // PAGE):
                r = rng.random()
                pages.append(
                    zero if r < 0.1 else os.urandom(PAGE) if r < 0.55 else rng.choice(pool)
                )
            f.seek(region)
            f.write(b"".join(pages))


def write_disk_like(path: Path, size: int, seed: int) -> None:
    """Disk-layer-like: 64 KiB extents, 10% zeros, 55% random (compressed files), 35% text; the
    last fifth of the file never written (a hole, as in a sparse layer)."""
    rng = random.Random(seed)
    pool = _low_entropy_pages(rng, 256)
    extent = 64 * 1024
    written = size * 4 // 5
    with open(path, "wb") as f:
        f.truncate(size)
        for offset in range(0, written, extent):
            r = rng.random()
            if r < 0.1:
                data = bytes(extent)
            elif r < 0.65:
                data = os.urandom(extent)
            else:
                data = b"".join(rng.choices(pool, k=extent // PAGE))
            f.seek(offset)
            f.write(data)


def change_chunks(path: Path, fraction: float, seed: int) -> int:
    """Flips one byte in `fraction` of the file's non-zero chunks; returns how many changed."""
    rng = random.Random(seed)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        nonzero = [
            off
            for off in range(0, size, DEFAULT_CHUNK_SIZE)
            if os.pread(f.fileno(), DEFAULT_CHUNK_SIZE, off).count(0)
            != min(DEFAULT_CHUNK_SIZE, size - off)
        ]
        victims = rng.sample(nonzero, max(1, round(len(nonzero) * fraction)))
        for off in victims:
            old = os.pread(f.fileno(), 1, off + 100)
            os.pwrite(f.fileno(), bytes([old[0] ^ 0xFF]), off + 100)
    return len(victims)


# ---- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing on port {port}")


@contextmanager
def process(args: list[str], env: dict[str, str], port: int) -> Iterator[None]:
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def snapstore_env(port: int, extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "AENV_SNAPSTORE_LISTEN": f"127.0.0.1:{port}",
        "AENV_SNAPSTORE_GC_INTERVAL_SECONDS": "0",
        "AENV_LOG_LEVEL": "WARNING",
        **extra,
    }


# ---- measurements ----------------------------------------------------------------------------


def mbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / MIB / seconds, 1)


def cp_floor(src: Path, dest_dir: Path) -> float:
    dest = dest_dir / f"cp-{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    subprocess.run(["cp", str(src), str(dest)], check=True)
    fd = os.open(dest, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    seconds = time.perf_counter() - t0
    dest.unlink()
    return seconds


async def s3_floor(client: Any, bucket: str, src: Path) -> float:
    sem = asyncio.Semaphore(RAW_S3_CONCURRENCY)
    size = src.stat().st_size
    prefix = uuid.uuid4().hex

    async def put(offset: int) -> None:
        async with sem:
            data = await asyncio.to_thread(_pread, src, offset)
            await client.put_object(Bucket=bucket, Key=f"raw/{prefix}/{offset}", Body=data)

    t0 = time.perf_counter()
    await asyncio.gather(*(put(off) for off in range(0, size, DEFAULT_CHUNK_SIZE)))
    seconds = time.perf_counter() - t0
    for off in range(0, size, DEFAULT_CHUNK_SIZE):
        await client.delete_object(Bucket=bucket, Key=f"raw/{prefix}/{off}")
    return seconds


def _pread(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        return os.pread(f.fileno(), DEFAULT_CHUNK_SIZE, offset)


async def empty_store(stub: Any) -> None:
    """Deletes every snapshot and collects every chunk, so the next push starts cold."""
    listed = await stub.ListManifests(pb.ListManifestsRequest())
    for snapshot_id in listed.snapshot_ids:
        await stub.DeleteManifest(pb.DeleteManifestRequest(snapshot_id=snapshot_id))
    await stub.CollectGarbage(pb.CollectGarbageRequest(grace_seconds=0))


async def persist_runs(
    stub: Any, files: dict[str, Path], repeats: int
) -> dict[str, list[PushStats]]:
    runs: dict[str, list[PushStats]] = {name: [] for name in files}
    for _ in range(repeats):
        for name, path in files.items():
            await empty_store(stub)
            runs[name].append(
                await push_files(stub, f"{name}-{uuid.uuid4().hex[:8]}", "", {name: path})
            )
    return runs


async def incremental_run(stub: Any, files: dict[str, Path], seed: int) -> dict[str, Any]:
    await empty_store(stub)
    await push_files(stub, "base", "", files)
    changed = {
        name: await asyncio.to_thread(change_chunks, path, 0.01, seed)
        for name, path in files.items()
    }
    stats = await push_files(stub, f"child-{seed}", "base", files)
    total = sum(p.stat().st_size for p in files.values())
    return {
        "changed_chunks": sum(changed.values()),
        "changed_by_file": changed,
        "sent_chunks": stats.sent_chunks,
        "total_chunks": stats.chunks,
        "only_changed_sent": stats.sent_chunks == sum(changed.values()),
        "seconds": round(stats.seconds, 3),
        "effective_MBps": mbps(total, stats.seconds),
    }


def summarize(name: str, size: int, runs: list[PushStats], floor_s: list[float]) -> dict[str, Any]:
    store = statistics.median(mbps(size, r.seconds) for r in runs)
    floor = statistics.median(mbps(size, s) for s in floor_s)
    last = runs[-1]
    return {
        "file": name,
        "size_MiB": size // MIB,
        "snapstore_MBps_median": store,
        "floor_MBps_median": floor,
        "floor_over_snapstore": round(floor / store, 2),
        "within_1_5x": floor / store <= 1.5,
        "chunks": last.chunks,
        "zero_chunks": last.zero_chunks,
        "sent_MiB": round(last.sent_bytes / MIB, 1),
        "sent_compressed_MiB": round(last.sent_compressed_bytes / MIB, 1),
        "samples_snapstore_s": [round(r.seconds, 3) for r in runs],
        "samples_floor_s": [round(s, 3) for s in floor_s],
    }


# ---- targets ---------------------------------------------------------------------------------


async def bench_fs(files: dict[str, Path], work: Path, repeats: int) -> dict[str, Any]:
    port = free_port()
    store_root = work / "store"
    env = snapstore_env(port, {"AENV_SNAPSTORE_FS_ROOT": str(store_root)})
    with process([sys.executable, "-m", "aenv_snapstore"], env, port):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = snapstore_stub(channel)
            runs = await persist_runs(stub, files, repeats)
            floors = {n: [cp_floor(p, work) for _ in range(repeats)] for n, p in files.items()}
            incremental = await incremental_run(stub, files, seed=1)
            await empty_store(stub)
    shutil.rmtree(store_root, ignore_errors=True)
    return {
        "floor": "cp + fsync to the same disk",
        "files": [summarize(n, p.stat().st_size, runs[n], floors[n]) for n, p in files.items()],
        "re_persist_1pct": incremental,
    }


async def bench_s3(files: dict[str, Path], repeats: int) -> dict[str, Any]:
    moto_port, port = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{moto_port}"
    bucket = "bench-snapstore"
    moto_env = {**os.environ, **S3_KEYS}
    env = snapstore_env(
        port,
        {
            "AENV_SNAPSTORE_BACKEND": "s3",
            "AENV_SNAPSTORE_S3_ENDPOINT_URL": endpoint,
            "AENV_SNAPSTORE_S3_BUCKET": bucket,
            "AENV_SNAPSTORE_S3_CREATE_BUCKET": "true",
            "AENV_SNAPSTORE_S3_ACCESS_KEY_ID": S3_KEYS["AWS_ACCESS_KEY_ID"],
            "AENV_SNAPSTORE_S3_SECRET_ACCESS_KEY": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        },
    )
    moto = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)]
    with (
        process(moto, moto_env, moto_port),
        process([sys.executable, "-m", "aenv_snapstore"], env, port),
    ):
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                get_session().create_client(
                    "s3",
                    endpoint_url=endpoint,
                    region_name="us-east-1",
                    aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
                )
            )
            channel = await stack.enter_async_context(
                grpc.aio.insecure_channel(f"127.0.0.1:{port}")
            )
            stub = snapstore_stub(channel)
            runs = await persist_runs(stub, files, repeats)
            floors = {
                n: [await s3_floor(client, bucket, p) for _ in range(repeats)]
                for n, p in files.items()
            }
            incremental = await incremental_run(stub, files, seed=2)
            await empty_store(stub)
    return {
        "floor": f"aiobotocore put_object, same bytes, 2 MiB objects, {RAW_S3_CONCURRENCY} at once",
        "files": [summarize(n, p.stat().st_size, runs[n], floors[n]) for n, p in files.items()],
        "re_persist_1pct": incremental,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mem-mib", type=int, default=256)
    parser.add_argument("--disk-mib", type=int, default=1024)
    parser.add_argument("--backends", default="fs,s3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="snapstore-bench-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        files = {"memory": work / "memory", "disk": work / "disk"}
        await asyncio.to_thread(write_memory_like, files["memory"], args.mem_mib * MIB, 1)
        await asyncio.to_thread(write_disk_like, files["disk"], args.disk_mib * MIB, 2)
        result: dict[str, Any] = {
            "chunk_size_MiB": DEFAULT_CHUNK_SIZE // MIB,
            "repeats": args.repeats,
        }
        backends = args.backends.split(",")
        if "fs" in backends:
            result["fs"] = await bench_fs(files, work, args.repeats)
        if "s3" in backends:
            result["s3_moto"] = await bench_s3(files, args.repeats)
    emit("snapstore_persist", result)


if __name__ == "__main__":
    asyncio.run(main())
