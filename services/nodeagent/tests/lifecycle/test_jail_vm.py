"""Every sandbox's QEMU jailed, with real VMs: a warm-pool VM made a sandbox, a created one and
fork children each run as a uid of their own from the node's range, with no capabilities,
no_new_privs and seccomp filters (QEMU's, and the preload's that kills an exec or fork), in a
root that holds their own directory and only read-only shared files; fork (frozen copies) and
pause/resume work jailed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aenv_nodeagent.sandbox.model import Sandbox

from .conftest import JAIL_UIDS, node_parts, spec, until
from .guest import sh

pytestmark = [pytest.mark.vm, pytest.mark.netns]


def _jailed(pid: int) -> int:
    """The uid QEMU `pid` runs as, once checked to hold no privilege."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    uid = int(status["Uid"].split()[0])
    assert status["Uid"].split() == [str(uid)] * 4 and uid in JAIL_UIDS
    assert all(int(status[cap], 16) == 0 for cap in ("CapPrm", "CapEff", "CapBnd", "CapAmb"))
    assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2")
    # The jail's hole-punch filter, the preload's exec filter (vmm/execfilter.c), QEMU's own.
    assert status["Seccomp_filters"] == "3"
    return uid


def _binds(pid: int) -> dict[str, bool]:
    """The mount points of QEMU `pid`'s root beyond the system's: writable or not."""
    found = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4]
        if point != "/" and not point.startswith(("/usr", "/dev", "/proc")):
            found[point] = "rw" in fields[5].split(",")
    return found


async def test_sandboxes_pool_vms_and_fork_children_run_jailed() -> None:
    async with node_parts(pool_vms=1) as node:
        first = spec()
        # From now on VMs are pre-started for the template.
        await node.sandboxes.creates.create(first)
        await until(lambda: node.pool.sizes()["vms"] == 1, "pre-started VM")
        pooled_spec = spec()
        pooled = await node.sandboxes.creates.create(pooled_spec)
        assert "pooled_vm" in pooled.timings_ms
        token = pooled_spec.envd_access_token
        await sh(node.session, pooled.host, token, "echo kept > /root/f")
        children = await node.sandboxes.forks.fork(pooled_spec.sandbox_id, 2, timeout_s=600)
        sandboxes = [node.sandboxes.registry.get(s.sandbox_id) for s in (first, pooled_spec)] + [
            node.sandboxes.registry.get(c.sandbox_id) for c in children if isinstance(c, Sandbox)]
        assert len(sandboxes) == 4, children
        uids = [_jailed(s.vm.pid) for s in sandboxes]
        assert len(set(uids)) == len(uids)  # one each
        for sandbox in sandboxes:
            binds = _binds(sandbox.vm.pid)
            # Its own directory (where it was started: a pooled VM's was renamed since) is the
            # only writable path; the rest (kernel, template disk and memory) is shared, read-only.
            writable = [point for point, rw in binds.items() if rw]
            assert len(writable) == 1
            assert os.path.samefile(f"/proc/{sandbox.vm.pid}/root{writable[0]}",
                                    sandbox.directory)
            assert not any(point.startswith(str(node.state_dir / "sandboxes")) and not rw
                           for point, rw in binds.items())  # no other sandbox's files
        child = sandboxes[2]
        assert await sh(node.session, child.host, child.record.envd_access_token,
                        "cat /root/f") == "kept\n"
        # Pause and resume under the jail: a new QEMU, a new uid, the same guest.
        await node.sandboxes.pauses.pause(pooled_spec.sandbox_id)
        resumed = await node.sandboxes.pauses.resume(pooled_spec.sandbox_id)
        assert _jailed(resumed.vm.pid) in JAIL_UIDS
        assert await sh(node.session, resumed.host, token, "cat /root/f") == "kept\n"
