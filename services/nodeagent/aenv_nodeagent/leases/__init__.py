"""Experiment leases on the node (docs/leases.md): this node's sandboxes end when their lease
lapses."""

from aenv_nodeagent.leases.reaper import LeasedSandboxes, LeaseReaper
from aenv_nodeagent.leases.wing import WingSandboxes

__all__ = ["LeaseReaper", "LeasedSandboxes", "WingSandboxes"]
