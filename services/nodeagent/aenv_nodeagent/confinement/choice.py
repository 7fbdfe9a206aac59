"""Whether this node confines its VMs in cgroups, by its `vmm_cgroups` setting: `required` fails
the node's start when the host cannot, `auto` runs unconfined then (a WARNING, and the node's
status says so), `off` does not try. Never unconfined without saying it."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aenv_nodeagent.confinement import cgroupfs
from aenv_nodeagent.confinement.cgroups import ConfinementUnavailable, VmCgroups, detect
from aenv_nodeagent.confinement.limits import LimitSettings

log = logging.getLogger(__name__)

CgroupMode = Literal["required", "auto", "off"]


@dataclass(frozen=True)
class Confinement:
    """The node's VM cgroups (None: unconfined) and the line its status shows."""

    cgroups: VmCgroups | None
    status: str


def node_key(state_dir: Path) -> str:
    """A short name of the node's state directory: its cgroup slice's."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def choose(mode: CgroupMode, state_dir: Path, settings: LimitSettings,
           parent: str | None = None) -> Confinement:
    """:raise ConfinementUnavailable: `required`, and the host cannot confine VMs."""
    if mode == "off":
        log.warning("VMs run without cgroups (vmm_cgroups=off)")
        return Confinement(None, "unconfined: vmm_cgroups=off")
    try:
        hierarchies = detect(Path("/proc/self/mountinfo").read_text())
        cgroups = VmCgroups.open(hierarchies, node_key(state_dir), settings,
                                 cgroupfs.proc_cgroup_self(), parent)
    except ConfinementUnavailable as err:
        if mode == "required":
            raise ConfinementUnavailable(
                f"vmm_cgroups=required, but VMs cannot be confined: {err.message}") from err
        log.warning("VMs run without cgroups: the host cannot confine them",
                    extra={"reason": err.message})
        return Confinement(None, f"unconfined: {err.message}")
    return Confinement(cgroups, cgroups.describe())
