"""detect_accelerator with injected cpuinfo and device/module paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from aenv_nodeagent.vmm.accel import (
    Accelerator,
    cpu_has_hardware_virt,
    detect_accelerator,
    host_tsc_khz,
)

AMD_WITH_SVM = "processor\t: 0\ncpu MHz\t\t: 2445.406\nflags\t\t: fpu vme sse2 svm lahf_lm\n"
INTEL_WITH_VMX = "processor\t: 0\nflags\t\t: fpu vmx ept\n"
NO_VIRT = "processor\t: 0\ncpu MHz\t\t: 2445.406\nflags\t\t: fpu vme sse2 lahf_lm\n"


@pytest.fixture
def kvm_dev(tmp_path: Path) -> Path:
    device = tmp_path / "kvm"
    device.write_bytes(b"")
    return device


@pytest.fixture
def pvm_module(tmp_path: Path) -> Path:
    module = tmp_path / "kvm_pvm"
    module.mkdir()
    return module


@pytest.fixture
def pvm_kernel(tmp_path: Path) -> Path:
    kernel = tmp_path / "vmlinux-pvm"
    kernel.write_bytes(b"\x7fELF")
    return kernel


@pytest.mark.parametrize("cpuinfo", [AMD_WITH_SVM, INTEL_WITH_VMX])
def test_hardware_virt_with_openable_kvm_is_kvm(
    cpuinfo: str, kvm_dev: Path, tmp_path: Path
) -> None:
    choice = detect_accelerator(None, cpuinfo, kvm_dev, tmp_path / "absent")
    assert choice.accel is Accelerator.KVM
    assert choice.kernel_override is None
    assert choice.guest_tsc_khz is None


def test_hardware_virt_wins_over_pvm(kvm_dev: Path, pvm_module: Path, pvm_kernel: Path) -> None:
    choice = detect_accelerator(pvm_kernel, AMD_WITH_SVM, kvm_dev, pvm_module)
    assert choice.accel is Accelerator.KVM


def test_hardware_virt_without_kvm_device_is_tcg(tmp_path: Path) -> None:
    choice = detect_accelerator(None, AMD_WITH_SVM, tmp_path / "no-kvm", tmp_path / "absent")
    assert choice.accel is Accelerator.TCG
    assert "does not open" in choice.reason


def test_pvm_with_configured_kernel_overrides_kernel(
    kvm_dev: Path, pvm_module: Path, pvm_kernel: Path
) -> None:
    choice = detect_accelerator(pvm_kernel, NO_VIRT, kvm_dev, pvm_module)
    assert choice.accel is Accelerator.PVM
    assert choice.kernel_override == pvm_kernel


def test_pvm_without_configured_kernel_is_tcg(kvm_dev: Path, pvm_module: Path) -> None:
    choice = detect_accelerator(None, NO_VIRT, kvm_dev, pvm_module)
    assert choice.accel is Accelerator.TCG
    assert "no PVM guest kernel" in choice.reason
    assert choice.guest_tsc_khz == 2445406


def test_pvm_with_missing_kernel_file_is_tcg(
    kvm_dev: Path, pvm_module: Path, tmp_path: Path
) -> None:
    choice = detect_accelerator(tmp_path / "gone", NO_VIRT, kvm_dev, pvm_module)
    assert choice.accel is Accelerator.TCG
    assert "missing" in choice.reason


def test_pvm_module_without_kvm_device_is_tcg(
    pvm_module: Path, pvm_kernel: Path, tmp_path: Path
) -> None:
    choice = detect_accelerator(pvm_kernel, NO_VIRT, tmp_path / "no-kvm", pvm_module)
    assert choice.accel is Accelerator.TCG


def test_nothing_available_is_tcg(tmp_path: Path) -> None:
    choice = detect_accelerator(None, NO_VIRT, tmp_path / "no-kvm", tmp_path / "absent")
    assert choice.accel is Accelerator.TCG
    assert choice.reason == "no vmx/svm and kvm_pvm is not loaded"


def test_flag_must_be_a_whole_word_on_a_flags_line() -> None:
    assert not cpu_has_hardware_virt("flags\t\t: fpu svmx vmxe\n")
    assert not cpu_has_hardware_virt("model name\t: svm vmx\n")


def test_host_tsc_khz_parses_first_cpu_mhz() -> None:
    assert host_tsc_khz(NO_VIRT) == 2445406
    assert host_tsc_khz("flags\t: fpu\n") is None
    assert host_tsc_khz("cpu MHz\t: unknown\n") is None


def test_this_host_reads_real_proc_cpuinfo() -> None:
    # No injection: proves the default inputs work on this machine (PVM without a kernel -> TCG).
    choice = detect_accelerator(None)
    assert choice.accel in set(Accelerator)
    assert choice.reason
