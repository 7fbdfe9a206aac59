"""Confinement of VMM processes: a cgroup per VM (`cgroups.py`) with limits from its shape
(`limits.py`, pure), on cgroup v2 or v1 as the host has them (`cgroupfs.py`), chosen by the node's
`vmm_cgroups` setting (`choice.py`). The VMM joins its cgroup before it execs (vmm/jail.py)."""

from aenv_nodeagent.confinement.cgroups import ConfinementUnavailable, VmCgroup, VmCgroups
from aenv_nodeagent.confinement.choice import CgroupMode, Confinement, choose
from aenv_nodeagent.confinement.limits import LimitSettings, VmLimits, VmShape, limits_for

__all__ = [
    "CgroupMode", "Confinement", "ConfinementUnavailable", "LimitSettings", "VmCgroup",
    "VmCgroups", "VmLimits", "VmShape", "choose", "limits_for",
]
