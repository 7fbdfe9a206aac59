"""The node's jail choice, probed by jailing a real command: on this host it jails; where a
jail cannot be made, `required` fails the start and `auto` says why it runs VMs unjailed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aenv_nodeagent.vmm.jail_choice import JailUnavailable, choose
from aenv_nodeagent.vmm.uids import UidRange

UIDS = UidRange(1_100_008_000, 16)  # in no range a node agent or other tests hand out


def test_this_host_jails_vms(tmp_path: Path) -> None:
    choice = choose("required", UIDS, tmp_path / "root")
    assert choice.uids is not None and choice.uids.range == UIDS
    assert choice.status.startswith("jailed: uid 1100008000-1100008015, mount namespace")


def test_where_no_jail_can_be_made_required_fails_and_auto_says_so(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "root"
    not_a_directory.write_text("")  # a jail's root must be an empty directory
    with pytest.raises(JailUnavailable, match="vmm_jail=required, but VMs cannot be jailed"):
        choose("required", UIDS, not_a_directory)
    fallback = choose("auto", UIDS, not_a_directory)
    assert fallback.uids is None and fallback.status.startswith("unjailed: ")


def test_off_does_not_jail(tmp_path: Path) -> None:
    assert choose("off", UIDS, tmp_path / "root").status == "unjailed: vmm_jail=off"
