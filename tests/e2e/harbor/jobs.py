"""Harbor as its users run it: the `harbor` CLI of its own venv (scripts/setup-harbor.sh), its
E2B environment pointed at a platform by E2B_API_KEY/E2B_API_URL/E2B_SANDBOX_URL, the oracle
agent, over the tasks in `tasks/` (their Dockerfiles start `FROM` an image the caller pushed);
then each trial's result as Harbor wrote it."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from e2b import AsyncSandbox

REPO = Path(__file__).resolve().parents[3]
HARBOR = REPO / ".venv" / "harbor" / "bin" / "harbor"
TASKS = Path(__file__).parent / "tasks"
BASE_IMAGE = "@BASE_IMAGE@"
# Nothing leaves the host: no telemetry, and litellm's bundled model prices, not fetched ones.
QUIET = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


@dataclass(frozen=True)
class Trial:
    task: str
    reward: float | None
    error: str | None  # Harbor's exception, type and message
    setup_s: float | None  # environment set-up: template resolved (or built) → sandbox ready
    total_s: float | None  # the whole trial
    folder: Path


def prepare_tasks(dest: Path, base_image: str, names: list[str] | None = None) -> Path:
    """A dataset folder of the tasks (`names`, or all) whose Dockerfiles start `FROM`
    `base_image`."""
    for task in sorted(TASKS.iterdir()):
        if names is not None and task.name not in names:
            continue
        shutil.copytree(task, dest / task.name, symlinks=True)
        dockerfile = dest / task.name / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text().replace(BASE_IMAGE, base_image))
    return dest


async def run_job(dataset: Path, jobs_dir: Path, job: str, env: dict[str, str], *,
                  concurrent: int, attempts: int = 1, timeout_s: float) -> list[Trial]:
    """`harbor run -e e2b -a oracle` over `dataset`; its trials once it is done.

    :raise AssertionError: Harbor failed or did not end within `timeout_s` (then it is killed).
    """
    argv = [str(HARBOR), "run", "--path", str(dataset), "--env", "e2b", "--agent", "oracle",
            "--n-concurrent", str(concurrent), "--n-attempts", str(attempts),
            "--jobs-dir", str(jobs_dir), "--job-name", job, "--yes", "--quiet"]
    log = jobs_dir / f"{job}.log"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env | QUIET, stdout=out, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL)
    try:
        code = await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        proc.kill()  # this one process, by its pid; its sandboxes are killed by the caller
        await proc.wait()
        raise AssertionError(f"harbor did not end in {timeout_s} s: {_tail(log)}") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0, f"harbor exited {code}: {_tail(log)}"
    return trials(jobs_dir / job)


def trials(job_dir: Path) -> list[Trial]:
    found = []
    for result_path in sorted(job_dir.glob("*/result.json")):
        result: dict[str, Any] = json.loads(result_path.read_text())
        rewards = (result.get("verifier_result") or {}).get("rewards") or {}
        error = result.get("exception_info")
        found.append(Trial(
            task=result["task_name"], reward=rewards.get("reward"),
            error=f"{error['exception_type']}: {error['exception_message']}" if error else None,
            setup_s=_seconds(result.get("environment_setup")), total_s=_seconds(result),
            folder=result_path.parent))
    return found


def _seconds(timing: dict[str, Any] | None) -> float | None:
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return None
    started, finished = (datetime.fromisoformat(timing[k]) for k in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


async def kill_harbor_sandboxes() -> list[str]:
    """Kills every running sandbox a Harbor trial made (its `harbor.trial_name` metadata),
    through the SDK as this process's E2B variables say; returns their ids."""
    paginator = AsyncSandbox.list()
    left: list[str] = []
    while paginator.has_next:
        left += [info.sandbox_id for info in await paginator.next_items()
                 if "harbor.trial_name" in (info.metadata or {})]
    for sandbox_id in left:
        await AsyncSandbox.kill(sandbox_id)
    return left
