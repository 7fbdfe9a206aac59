"""A template build from a Debian-with-Python image through the E2B API, beside its floor.

The image: one layer made here with umoci, pushed to a local docker-registry on loopback —
by default the files of the guest base rootfs `make artifacts` built (Debian 12 with Python,
Node, build tools: `--source rootfs`), or `mmdebstrap --variant=minbase
--include=python3-minimal bookworm` from the host's own apt sources (`--source minbase`).

- ours: the official SDK's `AsyncTemplate.build(... from_image(...).run_cmd(...)
  .set_start_cmd(...), skip_cache=True)` against a whole single-node platform (its templates
  and layer cache its own); before each build the image's blobs are dropped from the node's
  layer cache, so each build pulls, as the floor does. Phases are the node's (`template built`
  in its log): base_pull/unpack/ext4/qcow2 (image -> base disk), capture (boot, recipe, start
  and ready commands, snapshot), total; `sdk_wall` is the SDK call as its caller sees it.
- floor, same run, same image and disk size: `skopeo copy` + `umoci unpack` + `mkfs.ext4 -d` +
  `qemu-img convert` (image_base.floor), each timed.
- create latency: --creates sandboxes of the built template and of `base`, interleaved, each
  `AsyncSandbox.create` then a first `commands.run("true")`, then killed (not timed).

Figures are medians; ratios are of medians. `build_over_floor.total` is the node's total over
the floor's; `.base` is its four image phases alone over the floor (the same work).
Usage: python bench/template_build.py [--runs N] [--creates N] [--source rootfs|minbase]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _platform import artifact_cache, running_platform
from _stats import emit, summary_ms
from e2b import AsyncSandbox, AsyncTemplate
from e2b.template.logger import LogEntry
from e2b.template.main import TemplateFinal
from image_base import REGISTRY, floor, medians, registry_config, sh
from snapstore_persist import free_port, process

from aenv_cli.platform import Platform
from aenv_nodeagent.artifacts.rootfs import ensure_base_rootfs
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.images import BlobCache
from aenv_nodeagent.vmm import detect_accelerator
from aenv_testing.subnets import free_subnet

NAME = "bench-debian-python"
REPOSITORY = "bench/debian-python:1"
IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN = "python3 -c 'print(1)'"
START = "python3 -m http.server 8000"
READY = ("wget -q -O- http://127.0.0.1:8000 >/dev/null || python3 -c 'import urllib.request; "
         "urllib.request.urlopen(\"http://127.0.0.1:8000\")'")
NODE_PHASES = ("base_pull", "base_unpack", "base_ext4", "base_qcow2", "capture", "total")
FLOOR_OF = {"pull": "base_pull", "unpack": "base_unpack", "ext4": "base_ext4",
            "qcow2": "base_qcow2"}


# ---- the image -------------------------------------------------------------------------------


def rootfs_tree(qcow2: Path, work: Path, target: Path) -> None:
    """The files of the guest base rootfs (a qcow2 of ext4), mounted read-only and copied."""
    raw, mnt = work / "rootfs.raw", work / "mnt"
    sh("qemu-img", "convert", "-f", "qcow2", "-O", "raw", qcow2, raw)
    mnt.mkdir()
    sh("mount", "-o", "ro,loop", raw, mnt)
    try:
        sh("cp", "-a", f"{mnt}/.", target)
    finally:
        sh("umount", mnt)
        raw.unlink()
    shutil.rmtree(target / "lost+found", ignore_errors=True)


def minbase_tree(target: Path) -> None:
    """Debian minbase + python3-minimal, from the host's apt sources (mmdebstrap's default)."""
    sh("mmdebstrap", "--quiet", "--variant=minbase", "--include=python3-minimal", "bookworm",
       target)


def make_image(work: Path, source: str, qcow2: Path) -> tuple[Path, float]:
    """An OCI layout of one layer; and the MiB its files take."""
    layout, bundle = work / "layout", work / "bundle"
    sh("umoci", "init", "--layout", layout)
    sh("umoci", "new", "--image", f"{layout}:1")
    sh("umoci", "config", "--image", f"{layout}:1", "--config.env", IMAGE_PATH)
    sh("umoci", "unpack", "--image", f"{layout}:1", bundle)
    if source == "rootfs":
        rootfs_tree(qcow2, work, bundle / "rootfs")
    else:
        minbase_tree(bundle / "rootfs")
    du = subprocess.run(["du", "-sb", str(bundle / "rootfs")], check=True, capture_output=True,
                        text=True)
    sh("umoci", "repack", "--image", f"{layout}:1", bundle)
    shutil.rmtree(bundle)
    return layout, int(du.stdout.split()[0]) / (1 << 20)


def layout_blobs(layout: Path) -> list[Path]:
    return [p for p in (layout / "blobs" / "sha256").iterdir() if p.is_file()]


def push(layout: Path, reference: str) -> None:
    sh("skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:1",
       f"docker://{reference}")


# ---- builds through the SDK ------------------------------------------------------------------


def template(reference: str) -> TemplateFinal:
    return AsyncTemplate().from_image(reference).run_cmd(RUN).set_start_cmd(START, READY)


def forget_layers(cache: BlobCache, layout: Path) -> None:
    """Drop the image's blobs from the node's own layer cache: the next build pulls them."""
    for blob in layout_blobs(layout):
        cache.path(f"sha256:{blob.name}").unlink(missing_ok=True)


def node_phases(log: Path, build_id: str) -> dict[str, float]:
    """The node agent's phases (seconds) of this build, from its `template built` log line."""
    for line in reversed(log.read_text().splitlines()):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("msg") == "template built" and entry.get("build") == build_id:
            return {p: entry[f"{p}_ms"] / 1000 for p in NODE_PHASES}
    raise RuntimeError(f"no `template built` line for build {build_id} in {log}")


async def build_once(plat: Platform, reference: str, cache: BlobCache,
                     layout: Path) -> dict[str, float]:
    forget_layers(cache, layout)
    lines: list[LogEntry] = []
    t0 = time.perf_counter()
    info = await AsyncTemplate.build(template(reference), NAME, skip_cache=True,
                                     on_build_logs=lines.append)
    wall = time.perf_counter() - t0
    assert any(cache.has(f"sha256:{b.name}") for b in layout_blobs(layout)), \
        f"the node's layer cache is not {cache.root}: its pulls would not be cold"
    ready = [e.message for e in lines if e.message.startswith("template ready")]
    assert ready, f"no `template ready` line in the build's logs: {lines[-3:]}"
    phases = node_phases(plat.home / "logs" / "nodeagent.log", info.build_id)
    return {"sdk_wall": wall, **phases}


async def check_custom() -> None:
    """The built template's start command is captured running: its server answers at once."""
    sandbox = await AsyncSandbox.create(NAME, timeout=120)
    try:
        done = await sandbox.commands.run(READY)
        assert done.exit_code == 0, done.stderr
    finally:
        await sandbox.kill()


async def create_once(name: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    sandbox = await AsyncSandbox.create(name, timeout=120)
    t1 = time.perf_counter()
    try:
        await sandbox.commands.run("true")
        t2 = time.perf_counter()
    finally:
        await sandbox.kill()
    return t1 - t0, t2 - t0


async def creates(n: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {
        t: {"sdk_create": [], "create_to_first_command": []} for t in (NAME, "base")}
    for _ in range(n):  # interleaved: drift in the host hits both alike
        for name, figures in samples.items():
            create, first = await create_once(name)
            figures["sdk_create"].append(create)
            figures["create_to_first_command"].append(first)
    result: dict[str, Any] = {
        "custom" if t == NAME else t: {k: summary_ms(v) for k, v in figures.items()}
        for t, figures in samples.items()}
    result["custom_over_base_p50"] = {
        k: round(result["custom"][k]["p50_ms"] / result["base"][k]["p50_ms"], 3)
        for k in samples[NAME]}
    return result


# ---- the run ---------------------------------------------------------------------------------


def ratios(build: dict[str, float], floor_ms: dict[str, float]) -> dict[str, float]:
    base = sum(build[p] for p in FLOOR_OF.values())
    out = {"total": build["total"] / floor_ms["total"], "base": base / floor_ms["total"],
           "sdk_wall": build["sdk_wall"] / floor_ms["total"]}
    out.update({ours: build[ours] / floor_ms[f] for f, ours in FLOOR_OF.items()})
    return {k: round(v, 2) for k, v in out.items()}


async def measure(plat: Platform, reference: str, layout: Path, work: Path, runs: int,
                  n_creates: int, disk_mib: int) -> dict[str, Any]:
    os.environ.update(plat.e2b_env())
    os.environ.pop("E2B_DEBUG", None)
    cache = BlobCache(Path(plat.service_env()["AENV_NODEAGENT_IMAGE_CACHE_DIR"]))
    builds, floors = [], []
    for _ in range(runs):  # interleaved with the floor
        builds.append(await build_once(plat, reference, cache, layout))
        floors.append(await asyncio.to_thread(floor, reference, work, disk_mib))
    await check_custom()
    build_ms, floor_ms = medians(builds), medians(floors)
    return {"build_ms": build_ms, "floor_ms": floor_ms,
            "floor": "skopeo copy + umoci unpack + mkfs.ext4 -d + qemu-img convert",
            "build_over_floor": ratios(build_ms, floor_ms),
            "create": await creates(n_creates)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--creates", type=int, default=10)
    parser.add_argument("--source", choices=("rootfs", "minbase"), default="rootfs")
    args = parser.parse_args()
    disk_mib = NodeAgentSettings().default_disk_mib  # what the node gives a build by default
    qcow2 = (await ensure_base_rootfs(artifact_cache())).path
    with tempfile.TemporaryDirectory(prefix="template-bench-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        layout, content_mib = await asyncio.to_thread(make_image, work, args.source, qcow2)
        port = free_port()
        with process([REGISTRY, "serve", str(registry_config(work, port))], dict(os.environ),
                     port):
            reference = f"127.0.0.1:{port}/{REPOSITORY}"
            await asyncio.to_thread(push, layout, reference)
            async with running_platform("abtpl", free_subnet(20), own_templates=True) as plat:
                result = await measure(plat, reference, layout, work, args.runs, args.creates,
                                       disk_mib)
        compressed = sum(p.stat().st_size for p in layout_blobs(layout)) / (1 << 20)
    emit("template_build", {
        "image": {"reference": REPOSITORY, "source": args.source, "layers": 1,
                  "compressed_MiB": round(compressed, 1), "content_MiB": round(content_mib, 1)},
        "disk_mib": disk_mib,
        "runs": args.runs,
        "creates": args.creates,
        "accelerator": str(detect_accelerator(None).accel),
        **result,
    })


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
