"""The VM uids: one per VM from the range, never one a process still runs as, the freed ones
last, none past the range."""

from __future__ import annotations

import os
import subprocess

import pytest

from aenv_common.errors import ResourceExhausted
from aenv_nodeagent.vmm.uids import UidRange, VmUids, running_uids

FIRST = 1_100_005_000  # in no range a node agent or other tests hand out


def test_uids_are_handed_out_in_turn_and_freed_ones_come_last() -> None:
    uids = VmUids(UidRange(FIRST, 3))
    a, b = uids.acquire(), uids.acquire()
    assert (a, b) == (FIRST, FIRST + 1)
    uids.release(a)
    assert uids.acquire() == FIRST + 2
    assert uids.acquire() == FIRST  # the range wrapped round to the freed one
    with pytest.raises(ResourceExhausted):
        uids.acquire()


def test_a_uid_a_process_still_runs_as_is_not_handed_out() -> None:
    # A frozen copy outlives its QEMU: its uid must not go to another VM, which could trace it.
    sleeper = subprocess.Popen(["setpriv", f"--reuid={FIRST}", f"--regid={FIRST}",
                                "--clear-groups", "sleep", "60"])
    try:
        while FIRST not in running_uids():
            assert sleeper.poll() is None
        uids = VmUids(UidRange(FIRST, 2))
        assert uids.acquire() == FIRST + 1
        with pytest.raises(ResourceExhausted):
            uids.acquire()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_adopted_vms_uid_is_held() -> None:
    uids = VmUids(UidRange(FIRST, 2))
    uids.hold(FIRST)
    assert uids.acquire() == FIRST + 1
    assert FIRST in uids.range and FIRST + 2 not in uids.range
    assert os.getuid() not in uids.range
