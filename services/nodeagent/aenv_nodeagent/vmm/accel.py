"""Choose the accelerator a node's microVMs run under: hardware KVM, PVM, or TCG.

Order (host facts §1): hardware KVM when the CPU advertises vmx/svm and /dev/kvm opens; PVM when
the kvm_pvm module is loaded, /dev/kvm opens and a PVM guest kernel is configured (PVM runs only
kernels built for it); otherwise TCG, which is always correct but slow for guest code.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

logger = logging.getLogger(__name__)

_HARDWARE_VIRT_FLAGS = frozenset({"vmx", "svm"})


class Accelerator(StrEnum):
    KVM = "kvm"
    PVM = "pvm"
    TCG = "tcg"


@dataclass(frozen=True)
class AcceleratorChoice:
    accel: Accelerator
    reason: str
    # PVM runs only a guest kernel built for it; VMs must boot this one instead of the default.
    kernel_override: Path | None = None
    # TCG only: the host TSC rate (TCG guests read the host TSC). Passed to the guest as
    # tsc_early_khz, because under host load its PIT calibration fails and boot hangs.
    guest_tsc_khz: int | None = None


def cpu_has_hardware_virt(cpuinfo: str) -> bool:
    """True when any `flags` line of /proc/cpuinfo lists vmx (Intel) or svm (AMD)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags" and _HARDWARE_VIRT_FLAGS & set(value.split()):
            return True
    return False


def host_tsc_khz(cpuinfo: str) -> int | None:
    """The first `cpu MHz` of /proc/cpuinfo in kHz: the TSC rate on hosts without frequency
    scaling (the VMs and CI boxes where TCG gets chosen)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "cpu MHz":
            try:
                return round(float(value) * 1000)
            except ValueError:
                return None
    return None


def device_opens(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True


def detect_accelerator(
    pvm_guest_kernel: Path | None,
    cpuinfo: str | None = None,
    kvm_dev: Path = Path("/dev/kvm"),
    pvm_module: Path = Path("/sys/module/kvm_pvm"),
) -> AcceleratorChoice:
    """Pick the accelerator for this host; every input is injectable so the choice is testable."""
    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    choice = _choose(pvm_guest_kernel, cpuinfo, kvm_dev, pvm_module)
    if choice.accel is Accelerator.TCG:
        choice = replace(choice, guest_tsc_khz=host_tsc_khz(cpuinfo))
    logger.info(
        "accelerator chosen",
        extra={"accel": str(choice.accel), "reason": choice.reason,
               "kernel_override": str(choice.kernel_override or "")},
    )
    return choice


def _choose(
    pvm_guest_kernel: Path | None, cpuinfo: str, kvm_dev: Path, pvm_module: Path
) -> AcceleratorChoice:
    kvm_usable = device_opens(kvm_dev)
    if cpu_has_hardware_virt(cpuinfo):
        if kvm_usable:
            return AcceleratorChoice(Accelerator.KVM, f"cpu has vmx/svm and {kvm_dev} opens")
        return AcceleratorChoice(Accelerator.TCG, f"cpu has vmx/svm but {kvm_dev} does not open")
    if not pvm_module.exists():
        return AcceleratorChoice(Accelerator.TCG, "no vmx/svm and kvm_pvm is not loaded")
    if not kvm_usable:
        return AcceleratorChoice(Accelerator.TCG, f"kvm_pvm is loaded but {kvm_dev} does not open")
    if pvm_guest_kernel is None:
        return AcceleratorChoice(
            Accelerator.TCG, "kvm_pvm is loaded but no PVM guest kernel is configured"
        )
    if not pvm_guest_kernel.is_file():
        return AcceleratorChoice(
            Accelerator.TCG,
            f"kvm_pvm is loaded but the configured PVM guest kernel {pvm_guest_kernel} is missing",
        )
    return AcceleratorChoice(
        Accelerator.PVM,
        f"kvm_pvm is loaded and PVM guest kernel {pvm_guest_kernel} is configured",
        kernel_override=pvm_guest_kernel,
    )
