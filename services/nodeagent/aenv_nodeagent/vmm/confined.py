"""How the driver confines each QEMU it launches: its own cgroup (when the node has them) with
limits from the VM's spec, the rlimits of the exec step (jail.py), and, jailed (when the node
has a uid range), a uid of its own, a root holding only its files, no capabilities and QEMU's
own seccomp sandbox. All of it lives exactly as long as the QEMU: made before the spawn, undone
by the VM's shutdown or a failed launch, re-found on adoption."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.confinement import VmCgroup, VmCgroups, VmShape
from aenv_nodeagent.vmm import jail, jailed_files
from aenv_nodeagent.vmm.accel import Accelerator
from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.spec import VmSpec
from aenv_nodeagent.vmm.uids import VmUids

DEFAULT_NOFILE = 4096  # QEMU holds a few dozen: disks, fd sets, tap, QMP, eventfds
# The (empty) directory each jail mounts its root on, in its own mount namespace.
JAIL_ROOT = Path("/run/aenv/jail")
# QEMU's own filter (on top of ours): no obsolete calls, no setuid and friends, no scheduling or
# priority changes. Not spawn=deny: it kills the clone() of the frozen copies (vmm/freeze.c);
# the preload's own filter (vmm/execfilter.c) kills every other fork and exec instead.
SANDBOX_OPTION = "on,obsolete=deny,elevateprivileges=deny,resourcecontrol=deny"


@dataclass
class Confined:
    """What one VM holds of the node's jail: its cgroup, and its uid (None: it runs as root)."""

    cgroup: VmCgroup | None = None
    uid: int | None = None


@dataclass(frozen=True)
class VmJail:
    """The node's confinement of VMM processes. No cgroups: none (rlimits still); no uids: QEMU
    runs as root in the host's mount namespace."""

    cgroups: VmCgroups | None = None
    nofile: int = DEFAULT_NOFILE
    uids: VmUids | None = None
    root: Path = JAIL_ROOT

    def enter(self, spec: VmSpec, workdir: Path, console_log: Path | None) -> Confined:
        """The cgroup and uid a VM of `spec` is launched with, its files handed to the uid.
        :raise AenvError: they cannot be made."""
        confined = Confined()
        try:
            if self.cgroups is not None:
                confined.cgroup = self.cgroups.create(shape_of(spec))
            if self.uids is not None:
                confined.uid = self.uids.acquire()
                jailed_files.hand_over(spec, workdir, console_log, confined.uid)
        except BaseException:
            self.leave(confined)
            raise
        return confined

    def argv(
        self, spec: VmSpec, confined: Confined, files: VmFiles, workdir: Path,
        console_log: Path | None, qemu: Sequence[str], prefix: Sequence[str] = (),
    ) -> list[str]:
        """`qemu` (QEMU's argv) run through the exec step, after `prefix` (which must exec
        what follows it, as `ip netns exec NS` does: the jail's tap is the netns's)."""
        options: list[str] = []
        if confined.uid is not None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            binds = jailed_files.binds(spec, workdir, files, console_log)
            # Not the memory file: QEMU maps it from a descriptor (vmm/memfile.c).
            jailed_files.let_read([path for path in binds.readonly if path != spec.mem_path])
            options = jail.jail_options(confined.uid, self.root, binds.writable, binds.readonly,
                                        spec.net.tap if spec.net else None)
            qemu = [qemu[0], "-sandbox", SANDBOX_OPTION, *qemu[1:]]
        return [*prefix, *jail.wrapped(
            qemu, cgroup_procs=confined.cgroup.procs_files if confined.cgroup else (),
            nofile=self.nofile, hole_punch_filter=_needs_hole_punch_filter(spec),
            huge_pages=_wants_huge_pages(spec), jailed=options)]

    def adopt(self, pid: int) -> Confined:
        """The cgroup and uid of a QEMU an earlier run launched."""
        confined = Confined(self.cgroups.of_pid(pid) if self.cgroups is not None else None)
        uid = os.stat(f"/proc/{pid}").st_uid
        if self.uids is not None and uid in self.uids.range:
            self.uids.hold(uid)
            confined.uid = uid
        return confined

    def sweep(self) -> None:
        """Remove the cgroups of VMs that are gone (an earlier run's, killed at recovery)."""
        if self.cgroups is not None:
            self.cgroups.sweep()

    def forget(self, confined: Confined) -> None:
        """The VM was let go of, still running: its cgroup is not this agent's to remove (its
        uid stays held: it runs as it)."""
        if self.cgroups is not None and confined.cgroup is not None:
            self.cgroups.forget(confined.cgroup)

    def leave(self, confined: Confined) -> None:
        """The VM ended (or never started): its cgroup goes, its uid may serve again."""
        if self.cgroups is not None and confined.cgroup is not None:
            self.cgroups.remove(confined.cgroup)
            confined.cgroup = None
        if self.uids is not None and confined.uid is not None:
            self.uids.release(confined.uid)


def shape_of(spec: VmSpec) -> VmShape:
    # Under TCG the translation cache is QEMU's own memory, sized by the spec.
    tb_mib = spec.tcg_tb_mib if spec.accel.accel is Accelerator.TCG else 0
    return VmShape(spec.vcpus, spec.memory_mib, freezes=spec.copy_on_write_preload,
                   vmm_extra_mib=tb_mib)


def _wants_huge_pages(spec: VmSpec) -> bool:
    """Under KVM huge pages back guest RAM in fewer TLB entries; under TCG they only round each
    VM's translation cache up to 2 MiB steps, in memory no other VM can share."""
    return spec.accel.accel is not Accelerator.TCG


def _needs_hole_punch_filter(spec: VmSpec) -> bool:
    """Free page reporting in a VM mapping its RAM file copy-on-write: keep QEMU 7.2 from
    punching the reported pages out of the file (seccomp.py); the VM still gives them back."""
    return not spec.mem_shared and spec.free_page_reporting
