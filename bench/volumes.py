"""Volumes: file-system throughput on a volume against the guest's own disk and the host's disk
under the volume server, what a mount adds to a create, and a copy-on-write fork's cost.

One single-node platform (fs backend), in one run:

- `io`: bench/_volume_io.py with the same sizes (sequential write/read of BENCH_VOL_SEQ_MIB in
  1 MiB blocks, 4 KiB random writes and reads, 4 KiB small-file creates; medians of
  BENCH_VOL_REPEATS runs) on `/data` (a volume: NFSv3 through the node's relay to snapstore),
  on the guest's own disk (`/home/user`), and on the host in snapstore's volume working dir
  (the file system the volume server writes to), run by the host's python;
- `create_with_mount`: create (SDK, to the sandbox answering) with one volume mount vs none,
  alternated, p50 of BENCH_VOL_CREATES each;
- `fork`: native gRPC group fork of BENCH_VOL_FORKS children of a parent with a
  BENCH_VOL_FORK_GIB GiB volume in copy-on-write mode, vs the same fork of a parent with no
  volume: wall time and bytes the fork added to snapstore's backend (its fs root).

    .venv/bin/python bench/volumes.py
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, cast

from _platform import running_platform
from _stats import emit, summary_ms
from e2b import AsyncSandbox, AsyncVolume

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import AenvError
from aenv_client.client import VolumeMode
from aenv_testing.subnets import free_subnet

SEQ_MIB = int(os.environ.get("BENCH_VOL_SEQ_MIB", "64"))
RAND_OPS = int(os.environ.get("BENCH_VOL_RAND_OPS", "2000"))
SMALL_FILES = int(os.environ.get("BENCH_VOL_SMALL_FILES", "300"))
REPEATS = int(os.environ.get("BENCH_VOL_REPEATS", "3"))
CREATES = int(os.environ.get("BENCH_VOL_CREATES", "5"))
FORKS = int(os.environ.get("BENCH_VOL_FORKS", "16"))
FORK_GIB = float(os.environ.get("BENCH_VOL_FORK_GIB", "1"))
PROBE = Path(__file__).with_name("_volume_io.py")
GUEST_PROBE = "/root/volume_io.py"
MIB = 1 << 20


def log(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def tree_bytes(root: Path) -> int:
    """Bytes the files under `root` hold (a backend's objects on the fs backend)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


async def guest_probe(sandbox: AsyncSandbox, directory: str) -> dict[str, Any]:
    argv = f"python3 {GUEST_PROBE} {directory} {SEQ_MIB} {RAND_OPS} {SMALL_FILES} {REPEATS}"
    result = await sandbox.commands.run(argv, user="root", timeout=3600, request_timeout=3700)
    return dict(json.loads(result.stdout))


def host_probe(directory: Path) -> dict[str, Any]:
    argv = [
        sys.executable,
        str(PROBE),
        str(directory),
        str(SEQ_MIB),
        str(RAND_OPS),
        str(SMALL_FILES),
        str(REPEATS),
    ]
    return dict(json.loads(subprocess.run(argv, check=True, capture_output=True).stdout))


async def bench_io(platform: Platform) -> dict[str, Any]:
    volume = await AsyncVolume.create("bench-io-" + secrets.token_hex(3))
    try:
        sandbox = await AsyncSandbox.create(timeout=3600, volume_mounts={"/data": volume})
        try:
            await sandbox.files.write(GUEST_PROBE, PROBE.read_text(), user="root")
            log("io: volume")
            on_volume = await guest_probe(sandbox, "/data/bench")
            log("io: guest disk")
            on_disk = await guest_probe(sandbox, "/home/user/bench")
        finally:
            await AsyncSandbox.kill(sandbox.sandbox_id)
        log("io: host")
        work = platform.home / "volumes" / "bench-host-probe"
        on_host = await asyncio.to_thread(host_probe, work)
        await asyncio.to_thread(subprocess.run, ["rm", "-rf", str(work)], check=True)
    finally:
        await AsyncVolume.destroy(volume.volume_id)
    return {
        "volume_nfs": on_volume,
        "guest_own_disk": on_disk,
        "host_volume_work_dir": on_host,
        "sizes": {
            "seq_MiB": SEQ_MIB,
            "rand_ops": RAND_OPS,
            "small_files": SMALL_FILES,
            "repeats": REPEATS,
        },
    }


async def bench_create(platform: Platform) -> dict[str, Any]:
    volume = await AsyncVolume.create("bench-mount-" + secrets.token_hex(3))
    plain: list[float] = []
    mounted: list[float] = []
    try:
        for n in range(CREATES * 2):
            with_mount = n % 2 == 1
            started = time.perf_counter()
            sandbox = await AsyncSandbox.create(
                timeout=300, volume_mounts={"/data": volume} if with_mount else None
            )
            (mounted if with_mount else plain).append(time.perf_counter() - started)
            await AsyncSandbox.kill(sandbox.sandbox_id)
    finally:
        await AsyncVolume.destroy(volume.volume_id)
    no_mount, one_mount = summary_ms(plain), summary_ms(mounted)
    added = round(one_mount["p50_ms"] - no_mount["p50_ms"], 2)
    return {"no_mount": no_mount, "one_mount": one_mount, "added_p50_ms": added}


async def fill(volume: AsyncVolume, total: int) -> None:
    """`total` bytes of incompressible data in /fill.bin, streamed through the content API."""

    class Stream:
        """A file-like the SDK streams (it reads until b"")."""

        def __init__(self) -> None:
            self._left = total

        def read(self, size: int = -1) -> bytes:
            n = min(self._left, 4 * MIB if size is None or size < 0 else size)
            self._left -= n
            return os.urandom(n)

    await volume.write_file("/fill.bin", cast(IO[bytes], Stream()))


async def one_fork(
    platform: Platform, client: GatewayClient, volume: AsyncVolume | None, mode: VolumeMode
) -> dict[str, Any]:
    mounts: dict[str, AsyncVolume | str] | None = {"/data": volume} if volume is not None else None
    parent = await AsyncSandbox.create(timeout=1800, volume_mounts=mounts)
    children: list[str] = []
    backend = platform.home / "snapstore"
    try:
        if volume is not None:
            await parent.commands.run(
                "md5sum /data/fill.bin > /dev/null", user="root", timeout=1800, request_timeout=1900
            )
        before = await asyncio.to_thread(tree_bytes, backend)
        started = time.perf_counter()
        outcomes = await client.fork_sandbox(
            parent.sandbox_id, FORKS, timeout_seconds=600, volume_mode=mode
        )
        took = time.perf_counter() - started
        children = [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
        errors = [str(o) for o in outcomes if isinstance(o, AenvError)]
        await asyncio.sleep(1)  # the clones' metadata reaches the backend within 0.2 s
        added = await asyncio.to_thread(tree_bytes, backend) - before
        if volume is not None and children:
            child = await AsyncSandbox.connect(children[0])
            await child.commands.run("echo mine > /data/child.txt", user="root")
        return {
            "children": len(children),
            "errors": errors,
            "fork_s": round(took, 2),
            "backend_bytes_added": added,
        }
    finally:
        await asyncio.gather(*(client.kill_sandbox(c) for c in children), return_exceptions=True)
        await AsyncSandbox.kill(parent.sandbox_id)


async def bench_fork(platform: Platform) -> dict[str, Any]:
    volume = await AsyncVolume.create("bench-fork-" + secrets.token_hex(3))
    try:
        log(f"fork: filling {FORK_GIB} GiB")
        started = time.perf_counter()
        await fill(volume, int(FORK_GIB * 1024) * MIB)
        fill_s = time.perf_counter() - started
        async with GatewayClient.for_home(platform.home, timeout_s=1800) as client:
            log("fork: without a volume")
            without = await one_fork(platform, client, None, "shared")
            log("fork: copy-on-write")
            cow = await one_fork(platform, client, volume, "copy_on_write")
    finally:
        for _ in range(60):  # the killed children's clones go by the gateway's sweep first
            try:
                await AsyncVolume.destroy(volume.volume_id)
                break
            except Exception:
                await asyncio.sleep(2)
    return {
        "count": FORKS,
        "volume_GiB": FORK_GIB,
        "fill_MiB_s_content_api": round(FORK_GIB * 1024 / fill_s, 1),
        "no_volume": without,
        "copy_on_write": cow,
    }


async def main() -> None:
    os.environ.update(
        AENV_NODEAGENT_PREWARM_CODE_INTERPRETER="false",
        AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S="300",
    )
    prefix = "abv" + secrets.token_hex(2) + "x"
    async with running_platform(prefix, free_subnet(22)) as platform:
        for name, value in platform.e2b_env().items():
            os.environ[name] = value
        os.environ["E2B_VOLUME_API_URL"] = platform.api_url
        result: dict[str, Any] = {}
        parts = os.environ.get("BENCH_VOL_PARTS", "io,create,fork").split(",")
        if "io" in parts:
            result["io"] = await bench_io(platform)
            log(json.dumps(result["io"]))
        if "create" in parts:
            result["create_with_mount"] = await bench_create(platform)
            log(json.dumps(result["create_with_mount"]))
        if "fork" in parts:
            result["fork"] = await bench_fork(platform)
    emit("volumes", result)


if __name__ == "__main__":
    asyncio.run(main())
