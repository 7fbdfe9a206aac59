"""Run inside a sandbox, as root, with the node agent's confinement package on its path: the guest
is a pure cgroup v2 host (its init mounts only cgroup2 at /sys/fs/cgroup), so the node agent's v2
path runs here on a real kernel. It makes a node's slice and one VM cgroup, starts a worker
through the jail step's script (`vmm/jail.py`, as every QEMU is started), lets the worker push on
its limits, removes what it made, and prints what it saw as one JSON line.

argv: the directory holding jail.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from aenv_nodeagent.confinement import LimitSettings, VmShape, choose

SETTINGS = LimitSettings(memory_overhead_mib=16, pids_max=24)
SHAPE = VmShape(vcpus=1, memory_mib=32)
# The worker, in the VM cgroup: where it is, how many tasks it may start, some CPU time, and a
# memory hog in a child (the OOM killer must take the child, inside the cgroup, not the worker).
WORKER = r"""
import json, os, subprocess, sys, threading, time
placed = open("/proc/self/cgroup").read().strip()
started, stop = 0, threading.Event()
try:
    for _ in range(64):
        threading.Thread(target=stop.wait, daemon=True).start()
        started += 1
except RuntimeError:
    pass
stop.set()
time.sleep(0.5)
end = time.monotonic() + 0.5
while time.monotonic() < end:
    pass
touch = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"
hog = subprocess.run([sys.executable, "-c", touch])
print(json.dumps({"cgroup": placed, "threads": started, "hog_status": hog.returncode}))
"""


def read(directory: Path, name: str) -> str:
    return (directory / name).read_text().strip()


def main(jail_dir: str) -> None:
    sys.path.insert(0, jail_dir)
    import jail  # the jail step, as the node agent runs it

    seen: dict[str, object] = {
        "cpus": os.cpu_count(),
        "controllers": read(Path("/sys/fs/cgroup"), "cgroup.controllers").split(),
    }
    with tempfile.TemporaryDirectory() as state:
        confinement = choose("required", Path(state), SETTINGS)
        cgroups = confinement.cgroups
        assert cgroups is not None
        seen["status"] = confinement.status
        seen["slice"] = str(cgroups.slices[0])
        seen["slice_cpu_weight"] = int(read(cgroups.slices[0], "cpu.weight"))
        cgroup = cgroups.create(SHAPE)
        (directory,) = cgroup.dirs
        seen["files"] = {name: read(directory, name)
                         for name in ("cpu.max", "memory.max", "pids.max", "io.weight")}
        argv = jail.wrapped([sys.executable, "-c", WORKER], cgroup_procs=cgroup.procs_files,
                            nofile=64)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        seen["worker"] = json.loads(done.stdout) if done.returncode == 0 else done.stderr
        seen["directory"] = str(directory)
        seen["events"] = {
            "memory": dict(line.split() for line in read(directory, "memory.events").splitlines()),
            "pids": dict(line.split() for line in read(directory, "pids.events").splitlines()),
            "cpu": dict(line.split() for line in read(directory, "cpu.stat").splitlines()),
        }
        seen["removed"] = cgroups.remove(cgroup)
        seen["left_after_remove"] = directory.exists()
        cgroups.close()
        seen["slice_left_after_close"] = cgroups.slices[0].exists()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
