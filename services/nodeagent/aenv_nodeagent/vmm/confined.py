"""How the driver confines each QEMU it launches: its own cgroup (when the node has them) with
limits from the VM's spec, and the rlimits of the exec step (jail.py). The cgroup lives exactly
as long as the QEMU: made before the spawn, removed by the VM's shutdown or a failed launch,
re-found on adoption."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aenv_nodeagent.confinement import VmCgroup, VmCgroups, VmShape
from aenv_nodeagent.vmm import jail
from aenv_nodeagent.vmm.accel import Accelerator
from aenv_nodeagent.vmm.spec import VmSpec

DEFAULT_NOFILE = 4096  # QEMU holds a few dozen: disks, fd sets, tap, QMP, eventfds


@dataclass(frozen=True)
class VmJail:
    """The node's confinement of VMM processes; no cgroups means unconfined (rlimits still)."""

    cgroups: VmCgroups | None = None
    nofile: int = DEFAULT_NOFILE

    def enter(self, spec: VmSpec) -> VmCgroup | None:
        """The cgroup a VM of `spec` is launched into. :raise Internal: it cannot be made."""
        if self.cgroups is None:
            return None
        return self.cgroups.create(shape_of(spec))

    def argv(self, spec: VmSpec, cgroup: VmCgroup | None, argv: Sequence[str]) -> list[str]:
        """`argv` (which must exec QEMU) run through the exec step."""
        return jail.wrapped(
            argv, cgroup_procs=cgroup.procs_files if cgroup else (), nofile=self.nofile,
            hole_punch_filter=_needs_hole_punch_filter(spec))

    def adopt(self, pid: int) -> VmCgroup | None:
        """The cgroup of a QEMU an earlier run launched."""
        return self.cgroups.of_pid(pid) if self.cgroups is not None else None

    def sweep(self) -> None:
        """Remove the cgroups of VMs that are gone (an earlier run's, killed at recovery)."""
        if self.cgroups is not None:
            self.cgroups.sweep()

    def forget(self, cgroup: VmCgroup | None) -> None:
        """The VM was let go of, still running: its cgroup is not this agent's to remove."""
        if self.cgroups is not None and cgroup is not None:
            self.cgroups.forget(cgroup)

    def leave(self, cgroup: VmCgroup | None) -> None:
        """The VM ended (or never started): its cgroup goes."""
        if self.cgroups is not None and cgroup is not None:
            self.cgroups.remove(cgroup)


def shape_of(spec: VmSpec) -> VmShape:
    # Under TCG the translation cache is QEMU's own memory, sized by the spec.
    tb_mib = spec.tcg_tb_mib if spec.accel.accel is Accelerator.TCG else 0
    return VmShape(spec.vcpus, spec.memory_mib, freezes=spec.preload_library is not None,
                   vmm_extra_mib=tb_mib)


def _needs_hole_punch_filter(spec: VmSpec) -> bool:
    """Free page reporting in a VM mapping its RAM file copy-on-write: keep QEMU 7.2 from
    punching the reported pages out of the file (seccomp.py); the VM still gives them back."""
    return not spec.mem_shared and spec.free_page_reporting
