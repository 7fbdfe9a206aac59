"""The node agent's cgroup v2 path on a real pure-v2 kernel. These hosts are cgroup v1 (hybrid),
so the v2 code would otherwise meet a real kernel only on another machine: a sandbox's guest is
such a host (its init mounts cgroup2 alone, every controller on it). The node agent's
confinement package and jail step run there as root, as on a node (in_guest.py), and this test
checks what the kernel made of them: the slice and the VM cgroup with the controllers enabled
from the root down, the limits written, the worker placed by the jail step, the limits holding
(tasks refused at pids.max, a memory hog OOM-killed inside the cgroup, CPU time accounted to
it), and nothing left after removal. The guest has one vCPU, which its quota of one CPU cannot
throttle: the quota's effect is shown on the v1 hosts (tests/e2e/isolation)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import grpc
import pytest
import typing_extensions
from e2b import Sandbox

import aenv_common
import aenv_nodeagent

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

GUEST_DIR = "/root/aenv-v2"
NODEAGENT = Path(aenv_nodeagent.__file__).parent
MIB = 1 << 20


def _bundle() -> bytes:
    """What in_guest.py imports: grpc and what it needs (for aenv_common.errors), aenv_common, the
    confinement package and the jail step's scripts, as a tar.gz."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:

        def add(path: Path, name: str) -> None:
            tar.add(path, name, filter=lambda i: None if "__pycache__" in i.name else i)

        add(Path(grpc.__file__).parent, "lib/grpc")
        tar.add(typing_extensions.__file__, "lib/typing_extensions.py")
        add(Path(aenv_common.__file__).parent, "lib/aenv_common")
        tar.add(NODEAGENT / "__init__.py", "lib/aenv_nodeagent/__init__.py")
        add(NODEAGENT / "confinement", "lib/aenv_nodeagent/confinement")
        for step in ("jail.py", "jailroot.py", "privileges.py", "seccomp.py"):
            tar.add(NODEAGENT / "vmm" / step, f"vmm/{step}")
        tar.add(Path(__file__).with_name("in_guest.py"), "in_guest.py")
    return out.getvalue()


def test_the_node_agents_v2_cgroups_hold_on_a_pure_v2_kernel(sandboxes: list[str]) -> None:
    sandbox = Sandbox.create(timeout=900, request_timeout=300)
    sandboxes.append(sandbox.sandbox_id)
    sandbox.files.write(f"{GUEST_DIR}.tgz", _bundle(), user="root", request_timeout=300)
    run = sandbox.commands.run(
        f"mkdir -p {GUEST_DIR} && tar xzf {GUEST_DIR}.tgz -C {GUEST_DIR} && "
        f"PYTHONPATH={GUEST_DIR}/lib python3 {GUEST_DIR}/in_guest.py {GUEST_DIR}/vmm",
        user="root", timeout=600, request_timeout=660)
    seen = json.loads(run.stdout.strip().splitlines()[-1])

    assert {"cpu", "memory", "pids", "io"} <= set(seen["controllers"]), seen
    assert seen["status"] == "cgroup v2 (cpu, io, memory, pids)", seen
    assert seen["slice"].startswith("/sys/fs/cgroup/aenv/aenv-"), seen
    assert seen["slice_cpu_weight"] >= 100 * seen["cpus"], seen
    assert seen["files"] == {
        "cpu.max": "100000 100000",
        "memory.max": str((32 + 16) * MIB),
        "pids.max": "24",
        "io.weight": "default 100",
    }, seen
    worker = seen["worker"]
    assert isinstance(worker, dict), worker  # else the jail step's or worker's stderr
    assert worker["cgroup"] == "0::" + seen["directory"].removeprefix("/sys/fs/cgroup"), seen
    assert 10 <= worker["threads"] < 24, seen  # refused at pids.max, with the main thread
    assert int(seen["events"]["pids"]["max"]) >= 1, seen
    assert worker["hog_status"] == -9, seen  # SIGKILLed by the cgroup's OOM killer
    assert int(seen["events"]["memory"]["oom_kill"]) >= 1, seen
    assert int(seen["events"]["cpu"]["usage_usec"]) > 0, seen  # accounted to the VM's cgroup
    assert seen["removed"] is True and seen["left_after_remove"] is False, seen
    assert seen["slice_left_after_close"] is False, seen
