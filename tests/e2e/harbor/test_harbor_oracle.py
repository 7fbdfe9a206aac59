"""Harbor's E2B environment, unchanged, against the whole platform: `harbor run -e e2b -a
oracle` (Harbor 0.26 in a venv of its own) over four tasks whose Dockerfiles start `FROM` a Debian
image with Python pushed to Debian's docker-registry on loopback. Harbor builds each task's
template (AsyncTemplate, `harbor-<hash>:<tag>`), creates sandboxes by `name:<build id>`, uploads
/solution and /tests as root with tar, runs the oracle's solve.sh and the verifier, downloads
/logs and the artifacts folder: every trial's reward must be 1.

- localhost-server: the solution leaves a server on `localhost` (the image has no /etc/hosts of
  its own) that the verifier, a later command, reaches by name;
- pytest-verifier: pytest (from the image) is the verifier;
- folders: a nested solution folder up, an artifacts folder down;
- build-arg: a Dockerfile ARG holds during the build only, its ENV at run time too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.platform import Platform
from aenv_testing.registry import docker_registry, push

from .image import TAG, debian_python_layout
from .jobs import TASKS, kill_harbor_sandboxes, prepare_tasks, run_job

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.registry, pytest.mark.asyncio(loop_scope="session")]

# Four template builds (each boots the image's VM under TCG), then four trials.
JOB_TIMEOUT_S = 1500.0  # inside make test's per-test 1800 s: this says which part hung


@pytest_asyncio.fixture(loop_scope="session")
async def dataset(tmp_path: Path) -> AsyncIterator[Path]:
    """The tasks, `FROM` the Debian image in a registry of the test's own."""
    layout = await asyncio.to_thread(debian_python_layout)
    async with docker_registry(tmp_path / "registry") as registry:
        await push(f"oci:{layout}:{TAG}", registry, f"harbor/debian-python:{TAG}")
        yield prepare_tasks(tmp_path / "dataset", f"{registry.host}/harbor/debian-python:{TAG}")


async def test_harbor_oracle_trials_all_pass(
    platform: Platform, e2b_env: dict[str, str], sdk_env: None, dataset: Path, tmp_path: Path,
) -> None:
    try:
        trials = await run_job(dataset, tmp_path / "jobs", "oracle", e2b_env, concurrent=4,
                               timeout_s=JOB_TIMEOUT_S)
        # Harbor stops what it started: no trial's sandbox is left running.
        assert await kill_harbor_sandboxes() == []
    finally:
        await kill_harbor_sandboxes()
    by_task = {trial.task: trial for trial in trials}
    assert sorted(by_task) == sorted(task.name for task in TASKS.iterdir())
    for trial in trials:
        assert (trial.error, trial.reward) == (None, 1.0), (trial.task, _verifier_log(trial.folder))
    # The artifacts folder came down whole, as the solution wrote it.
    out = by_task["folders"].folder / "artifacts" / "app" / "out"
    assert (out / "manifest.txt").read_text() == (
        TASKS / "folders" / "tests" / "expected-manifest.txt").read_text()
    assert (out / "data" / "nested" / "deeper" / "c.txt").read_text() == "gamma\n"
    assert (out / "data" / "empty").is_dir()
    # pytest's own report came down with the verifier's logs.
    junit = by_task["pytest-verifier"].folder / "verifier" / "junit.xml"
    assert 'tests="2"' in junit.read_text() and 'failures="0"' in junit.read_text()


def _verifier_log(trial: Path) -> str:
    logs = sorted((trial / "verifier").glob("*")) if (trial / "verifier").is_dir() else []
    return "\n".join(f"{log.name}: {log.read_text(errors='replace')[-1500:]}" for log in logs
                     if log.is_file()) or (trial / "trial.log").read_text(errors="replace")[-3000:]
