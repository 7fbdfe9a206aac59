"""Why a VM ended, from QEMU's status, the VM cgroup's OOM kills, the guest console's tail and
whether the filesystem under its memory is full (sandbox/death_causes.py, pure). Console lines as
guests print them: errors and the panic (the OOM killer's one line before it, at loglevel=4)."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_nodeagent.sandbox.death_causes import (
    DISK_FULL_SIGBUS,
    Death,
    VmExit,
    classify_console,
    classify_exit,
    parse_oom_kills,
)

BOOTED = ["aenv-init: starting envd", "2026-01-01 00:00:00,000 INFO envd ready"]
SYSRQ = [*BOOTED, "[   12.1] sysrq: Trigger a crash",
         "[   12.1] Kernel panic - not syncing: sysrq triggered crash",
         "[   12.1] ---[ end Kernel panic - not syncing: sysrq triggered crash ]---"]
PANIC_ON_OOM = [*BOOTED, "[   30.2] Kernel panic - not syncing: Out of memory: system-wide "
                "panic_on_oom is enabled"]
NO_KILLABLE = [*BOOTED, "[   30.2] Kernel panic - not syncing: System is deadlocked on memory"]
# The OOM killer took envd, tini (PID 1) exited with it (its one KERN_ERR line, any loglevel
# from 4).
INIT_KILLED_BY_OOM = [*BOOTED, "[   40.0] Out of memory: Killed process 212 (python3) "
                      "total-vm:90000kB", "[   40.1] Kernel panic - not syncing: Attempted to "
                      "kill init! exitcode=0x00008900"]
INIT_EXITED = [*BOOTED, "[   40.1] Kernel panic - not syncing: Attempted to kill init! "
               "exitcode=0x00000100"]
POWERED_OFF = [*BOOTED, "[    9.0] reboot: Power down"]


def test_a_signal_or_a_failure_status_is_the_vmm_s_crash() -> None:
    assert classify_exit(VmExit(-9, 0, SYSRQ)) == Death(
        c.DEATH_CAUSE_VMM_CRASH, "qemu killed by signal 9")
    assert classify_exit(VmExit(1)) == Death(c.DEATH_CAUSE_VMM_CRASH, "qemu exited with status 1")


def test_the_host_s_oom_killer_is_named_whatever_the_status() -> None:
    death = classify_exit(VmExit(-9, host_oom_kills=1))
    assert death.cause == c.DEATH_CAUSE_VMM_CRASH and "host's OOM killer" in death.detail


def test_a_guest_panic_is_a_guest_crash_with_its_reason() -> None:
    assert classify_exit(VmExit(0, 0, SYSRQ)) == Death(
        c.DEATH_CAUSE_GUEST_CRASH, "the guest kernel panicked: sysrq triggered crash")
    assert classify_exit(VmExit(0, 0, INIT_EXITED)).cause == c.DEATH_CAUSE_GUEST_CRASH


def test_a_panic_about_memory_or_after_the_oom_killer_is_guest_oom() -> None:
    for console in (PANIC_ON_OOM, NO_KILLABLE, INIT_KILLED_BY_OOM):
        death = classify_exit(VmExit(0, 0, console))
        assert death.cause == c.DEATH_CAUSE_GUEST_OOM, console
        assert death.detail.startswith("the guest kernel ran out of memory and panicked: ")


def test_an_old_oom_report_far_before_the_panic_does_not_count() -> None:
    console = [*INIT_KILLED_BY_OOM[:-1], *(f"line {n}" for n in range(300)), SYSRQ[-2]]
    assert classify_console(console) == Death(
        c.DEATH_CAUSE_GUEST_CRASH, "the guest kernel panicked: sysrq triggered crash")


def test_a_power_off_or_a_restart_is_a_guest_crash_saying_which() -> None:
    assert classify_exit(VmExit(0, 0, POWERED_OFF)) == Death(
        c.DEATH_CAUSE_GUEST_CRASH, "the guest powered off")
    restarted = classify_exit(VmExit(0, 0, [*BOOTED, "reboot: Restarting system"]))
    assert restarted.cause == c.DEATH_CAUSE_GUEST_CRASH and "rebooted" in restarted.detail


def test_a_clean_exit_with_a_silent_console_is_still_the_guest_s() -> None:
    death = classify_exit(VmExit(0, 0, BOOTED))
    assert death.cause == c.DEATH_CAUSE_GUEST_CRASH and "status 0" in death.detail


def test_an_adopted_vm_s_unknown_status_reads_the_console_first() -> None:
    assert classify_exit(VmExit(None, 0, SYSRQ)).cause == c.DEATH_CAUSE_GUEST_CRASH
    assert classify_exit(VmExit(None, 0, BOOTED)).cause == c.DEATH_CAUSE_VMM_CRASH


def test_a_long_panic_reason_is_cut() -> None:
    death = classify_console([f"Kernel panic - not syncing: {'x' * 500}"])
    assert death is not None and len(death.detail) == 200 and death.detail.endswith("…")


def test_oom_kills_from_either_cgroup_version() -> None:
    v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
    assert (parse_oom_kills(v2), parse_oom_kills(v1), parse_oom_kills("")) == (2, 1, 0)


def test_a_sigbus_with_the_state_disk_full_is_disk_full() -> None:
    death = classify_exit(VmExit(-7, 0, BOOTED, state_disk_full=True))
    assert death == Death(c.DEATH_CAUSE_DISK_FULL, DISK_FULL_SIGBUS)


def test_a_sigbus_with_room_or_another_signal_on_a_full_disk_is_the_vmm_s_crash() -> None:
    assert classify_exit(VmExit(-7, 0, BOOTED)) == Death(
        c.DEATH_CAUSE_VMM_CRASH, "qemu killed by signal 7")
    assert classify_exit(VmExit(-9, 0, BOOTED, state_disk_full=True)) == Death(
        c.DEATH_CAUSE_VMM_CRASH, "qemu killed by signal 9")
    # The host's OOM killer is named first, whatever the disk.
    assert "host's OOM killer" in classify_exit(
        VmExit(-7, 1, BOOTED, state_disk_full=True)).detail
