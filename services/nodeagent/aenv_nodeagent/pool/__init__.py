"""The node's warm pool: what a restore needs, made before it is asked for (pool/warm.py)."""

from aenv_nodeagent.pool.demand import Demand
from aenv_nodeagent.pool.warm import VM_DIR_PREFIX, PooledVm, VmLauncher, VmWaker, WarmPool

__all__ = ["VM_DIR_PREFIX", "Demand", "PooledVm", "VmLauncher", "VmWaker", "WarmPool"]
