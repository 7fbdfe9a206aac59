"""VMM driver: QEMU `-M microvm` over QMP, accelerator auto-selection, capture and restore."""

from aenv_nodeagent.vmm.accel import Accelerator, AcceleratorChoice, detect_accelerator
from aenv_nodeagent.vmm.argv import VmFiles, build_argv
from aenv_nodeagent.vmm.confined import VmJail
from aenv_nodeagent.vmm.driver import QemuDriver, Vm, VmmDriver
from aenv_nodeagent.vmm.qemu import QemuVm
from aenv_nodeagent.vmm.spec import DiskSpec, NetSpec, VmSpec

__all__ = [
    "Accelerator",
    "AcceleratorChoice",
    "DiskSpec",
    "NetSpec",
    "QemuDriver",
    "QemuVm",
    "Vm",
    "VmFiles",
    "VmJail",
    "VmSpec",
    "VmmDriver",
    "build_argv",
    "detect_accelerator",
]
