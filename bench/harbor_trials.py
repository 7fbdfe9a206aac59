"""A Harbor job of 8 trials at once on one node, beside the same trials' commands through the
SDK without Harbor (the floor), in the same run.

- setup (not timed): a single-node platform (bench/_platform.py); the Debian-with-Python image
  of the Harbor test (tests/e2e/harbor/image.py) pushed to a loopback docker-registry; a first
  Harbor job over the test's four tasks builds their templates (its wall time is reported as
  `cold_job_wall_s`: four builds under TCG).
- harbor: `harbor run -e e2b -a oracle --n-concurrent 8 --n-attempts 2` over the same four tasks
  (8 trials, templates already built): the job's wall time, and per trial Harbor's own
  `environment_setup` (tag resolved → sandbox created → Harbor's preparation: its PATH drop-in,
  sysctl, build-time capture read, its folders) p50/p90, and the whole trial.
- floor: the same 8 trials' commands through the SDK: `AsyncSandbox.create("<name>:<build id>")`
  of the build Harbor used (set-up: until create returns, envd answering), then /solution and
  /tests up as one tar each and unpacked as root, solve.sh and test.sh with the image's env (read
  from Harbor's build-time capture, as Harbor does: template envs hold during the build only), the
  reward read, the kill; all 8 at once.

Every trial's reward must be 1 on both sides (else the bench fails).
Usage: python bench/harbor_trials.py
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import secrets
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from _platform import running_platform
from _stats import emit, summary_ms
from e2b import AsyncSandbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the Harbor test's helpers

from aenv_testing.registry import docker_registry, push
from aenv_testing.subnets import free_subnet
from tests.e2e.harbor.image import TAG, debian_python_layout
from tests.e2e.harbor.jobs import (
    Trial,
    kill_harbor_sandboxes,
    prepare_tasks,
    run_job,
)

CONCURRENT = 8
ATTEMPTS = 2  # of each of the four tasks
JOB_TIMEOUT_S = 3600.0
CAPTURE = "/var/lib/harbor/image-env"  # Harbor's record of the image's env, made at build
BUILD_PROCESS = frozenset({"HOME", "USER", "LOGNAME", "PWD", "OLDPWD", "SHLVL", "SHELL", "PS1",
                           "TERM", "_"})
_USING = re.compile(r"Using E2B template (harbor-[0-9a-f]+:[0-9a-f-]+)")


def template_ref(trial: Trial) -> str:
    """The `name:<build id>` Harbor created the trial's sandbox from (its trial log says)."""
    found = _USING.findall((trial.folder / "trial.log").read_text(errors="replace"))
    assert found, f"no template in {trial.folder}/trial.log"
    return str(found[-1])


def packed(folder: Path) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path in sorted(folder.iterdir()):
            archive.add(path, arcname=path.name)
    return out.getvalue()


async def image_env(sandbox: AsyncSandbox) -> dict[str, str]:
    """The image's runtime env as Harbor replays it: its build-time capture (NUL-separated, the
    build-only ARGs already left out), without the build process's own names."""
    raw = await sandbox.files.read(CAPTURE, user="root")
    pairs = (entry.partition("=") for entry in raw.split("\0"))
    return {key: value for key, sep, value in pairs
            if sep and key and key not in BUILD_PROCESS and not key.startswith("E2B_")}


async def floor_trial(ref: str, task: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    sandbox = await AsyncSandbox.create(ref, timeout=900)
    ready = time.perf_counter()
    try:
        envs = await image_env(sandbox)
        for folder in ("solution", "tests"):
            archive = f"/tmp/{folder}.tar.gz"
            await sandbox.files.write(archive, packed(task / folder), user="root")
            await sandbox.commands.run(f"mkdir -p /{folder} /logs/verifier && "
                                       f"tar -xzf {archive} -C /{folder} && rm {archive}",
                                       user="root", cwd="/")
            if folder == "solution":
                await sandbox.commands.run("bash /solution/solve.sh", user="root", cwd="/",
                                           envs=envs, timeout=300)
        await sandbox.commands.run("bash /tests/test.sh", user="root", cwd="/", envs=envs,
                                   timeout=300)
        reward = float(await sandbox.files.read("/logs/verifier/reward.txt", user="root"))
    finally:
        await sandbox.kill()
    assert reward == 1.0, f"floor trial of {task.name}: reward {reward}"
    return {"setup_s": ready - t0, "trial_s": time.perf_counter() - t0}


async def floor(trials: list[Trial], dataset: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = await asyncio.gather(*(floor_trial(template_ref(t), dataset / t.task)
                                  for t in trials))
    return {"wall_s": round(time.perf_counter() - t0, 2),
            "setup": summary_ms([d["setup_s"] for d in done]),
            "trial": summary_ms([d["trial_s"] for d in done])}


def harbor_figures(trials: list[Trial], wall_s: float) -> dict[str, Any]:
    for trial in trials:
        assert (trial.error, trial.reward) == (None, 1.0), (trial.task, trial.error, trial.folder)
    return {"wall_s": round(wall_s, 2), "trials": len(trials),
            "environment_setup": summary_ms([t.setup_s for t in trials if t.setup_s is not None]),
            "trial": summary_ms([t.total_s for t in trials if t.total_s is not None])}


async def main() -> None:
    prefix = "aeb" + "".join(secrets.choice("abcdefghij") for _ in range(3)) + "h"
    layout = await asyncio.to_thread(debian_python_layout)
    with tempfile.TemporaryDirectory(prefix="harbor-bench-") as tmp:
        work = Path(tmp)
        async with (running_platform(prefix, free_subnet(22)) as plat,
                    docker_registry(work / "registry") as registry):
            env = dict(os.environ) | plat.e2b_env()
            os.environ.update({k: v for k, v in env.items() if k.startswith("E2B_")})
            await push(f"oci:{layout}:{TAG}", registry, f"harbor/debian-python:{TAG}")
            dataset = prepare_tasks(work / "dataset",
                                    f"{registry.host}/harbor/debian-python:{TAG}")
            try:
                t0 = time.perf_counter()
                await run_job(dataset, work / "jobs", "cold", env, concurrent=4,
                              timeout_s=JOB_TIMEOUT_S)
                cold_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                trials = await run_job(dataset, work / "jobs", "warm", env,
                                       concurrent=CONCURRENT, attempts=ATTEMPTS,
                                       timeout_s=JOB_TIMEOUT_S)
                harbor = harbor_figures(trials, time.perf_counter() - t0)
                sdk = await floor(trials, dataset)
            finally:
                await kill_harbor_sandboxes()
    emit("harbor_trials", {
        "concurrent_trials": CONCURRENT, "tasks": sorted({t.task for t in trials}),
        "cold_job_wall_s": round(cold_s, 2), "harbor": harbor, "sdk_floor": sdk,
        "harbor_over_floor": {
            "wall": round(harbor["wall_s"] / sdk["wall_s"], 2),
            "setup_p50": round(harbor["environment_setup"]["p50_ms"] / sdk["setup"]["p50_ms"], 2),
        },
    })


if __name__ == "__main__":
    asyncio.run(main())
