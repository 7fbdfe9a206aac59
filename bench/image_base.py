"""OCI image -> read-only qcow2 base disk (the template build's first step), beside its floor.

The image: two layers made here with umoci from the host's own files (default: Python's library,
the C headers and gcc's files, then Perl's library, with the C headers' `linux/` deleted: a
whiteout), pushed to a local docker-registry on loopback.

- ours: `aenv_nodeagent.images.build_base_disk` from the registry with an empty layer cache
  (pull, unpack, ext4, qcow2 as its phases say), and once more with the cache warm;
- floor, same run, same image and disk size: `skopeo copy docker://… oci:…` + `umoci unpack` +
  `mkfs.ext4 -d` + `qemu-img convert -O qcow2`, each timed.

Each figure is the median of --runs runs; `ours_over_floor` is the ratio of the medians. Our
`total` is the whole call, including the removal of its work directory; the floor's is the sum
of its four steps (its clean-up is not counted).
Usage: python bench/image_base.py [--runs N] [--disk-mib M] [--dirs /a,/b --top-dirs /c]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _stats import emit
from snapstore_persist import free_port, process

from aenv_nodeagent.images import BlobCache, RegistrySource, build_base_disk

BASE_DIRS = "/usr/lib/python3.11,/usr/include,/usr/lib/gcc"
TOP_DIRS = "/usr/share/perl"
WHITEOUT = "usr/include/linux"
REGISTRY = "/usr/bin/docker-registry"
PHASES = ("pull", "unpack", "ext4", "qcow2")


def sh(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True, stdout=subprocess.DEVNULL)


def copy_into(rootfs: Path, dirs: list[str]) -> None:
    for source in dirs:
        target = rootfs / source.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        sh("cp", "-a", source, target)


def make_image(work: Path, base: list[str], top: list[str]) -> Path:
    layout, bundle = work / "layout", work / "bundle"
    sh("umoci", "init", "--layout", layout)
    sh("umoci", "new", "--image", f"{layout}:1")
    sh("umoci", "unpack", "--image", f"{layout}:1", bundle)
    copy_into(bundle / "rootfs", base)
    sh("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:1", bundle)
    copy_into(bundle / "rootfs", top)
    shutil.rmtree(bundle / "rootfs" / WHITEOUT, ignore_errors=True)
    sh("umoci", "repack", "--image", f"{layout}:1", bundle)
    shutil.rmtree(bundle)
    return layout


def registry_config(work: Path, port: int) -> Path:
    config = work / "registry.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {work / 'storage'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
        f"  secret: {secrets.token_hex(8)}\n")
    return config


async def ours(name: str, work: Path, disk_mib: int, cache: BlobCache | None) -> dict[str, float]:
    out = work / f"ours-{secrets.token_hex(4)}"
    fresh = cache is None
    cache = cache or BlobCache(work / f"cache-{secrets.token_hex(4)}")
    t0 = time.perf_counter()
    disk = await build_base_disk(RegistrySource(name), cache, out, disk_mib)
    total = time.perf_counter() - t0
    shutil.rmtree(out)
    if fresh:
        shutil.rmtree(cache.root)
    return {"total": total, **{p: disk.phases_ms[p] / 1000 for p in PHASES}}


def floor(name: str, work: Path, disk_mib: int) -> dict[str, float]:
    run = work / f"floor-{secrets.token_hex(4)}"
    run.mkdir()
    times: dict[str, float] = {}
    steps: dict[str, list[str | Path]] = {
        "pull": ["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{name}",
                 f"oci:{run / 'layout'}:1"],
        "unpack": ["umoci", "unpack", "--image", f"{run / 'layout'}:1", run / "bundle"],
        "ext4": ["mkfs.ext4", "-q", "-F", "-d", run / "bundle" / "rootfs", run / "raw.ext4",
                 f"{disk_mib}M"],
        "qcow2": ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", run / "raw.ext4",
                  run / "rootfs.qcow2"],
    }
    for phase, argv in steps.items():
        t0 = time.perf_counter()
        sh(*argv)
        times[phase] = time.perf_counter() - t0
    shutil.rmtree(run)
    return {"total": sum(times.values()), **times}


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(s[k] for s in samples) * 1000, 1) for k in samples[0]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--disk-mib", type=int, default=2048)
    parser.add_argument("--dirs", default=BASE_DIRS)
    parser.add_argument("--top-dirs", default=TOP_DIRS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="image-bench-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        layout = await asyncio.to_thread(make_image, work, args.dirs.split(","),
                                         args.top_dirs.split(","))
        port = free_port()
        argv = [REGISTRY, "serve", str(registry_config(work, port))]
        with process(argv, dict(os.environ), port):
            name = f"127.0.0.1:{port}/bench/image:1"
            sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:1",
               f"docker://{name}")
            warm = BlobCache(work / "warm-cache")
            await ours(name, work, args.disk_mib, warm)  # fills the warm cache
            cold, cached, floors = [], [], []
            for _ in range(args.runs):  # interleaved: drift in the host hits all alike
                cold.append(await ours(name, work, args.disk_mib, None))
                cached.append(await ours(name, work, args.disk_mib, warm))
                floors.append(await asyncio.to_thread(floor, name, work, args.disk_mib))
        image_mib = sum(f.stat().st_size for f in (layout / "blobs").rglob("*")) / (1 << 20)
        tree_files = sum(len(files) for d in args.dirs.split(",") + args.top_dirs.split(",")
                         for _, _, files in os.walk(d))
    result: dict[str, Any] = {
        "image": {"layers": 2, "compressed_MiB": round(image_mib, 1), "files_about": tree_files,
                  "dirs": args.dirs, "top_dirs": args.top_dirs},
        "disk_mib": args.disk_mib,
        "runs": args.runs,
        "ours_cold_cache_ms": medians(cold),
        "ours_warm_cache_ms": medians(cached),
        "floor_ms": medians(floors),
        "floor": "skopeo copy + umoci unpack + mkfs.ext4 -d + qemu-img convert",
    }
    ours_ms, floor_ms = result["ours_cold_cache_ms"], result["floor_ms"]
    result["ours_over_floor"] = {k: round(ours_ms[k] / floor_ms[k], 2) for k in floor_ms}
    emit("image_base", result)


if __name__ == "__main__":
    asyncio.run(main())
