"""The node's jail choice, probed by jailing a real command: on this host it jails; where a
jail cannot be made, `required` fails the start and `auto` says why it runs VMs unjailed."""

from __future__ import annotations

from pathlib import Path

import pytest

from aenv_nodeagent.vmm.jail_choice import JailUnavailable, choose
from aenv_nodeagent.vmm.uids import UidRange, UidRangeTaken, check_unclaimed, claims

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


def test_a_range_an_account_or_subordinate_range_uses_is_refused(tmp_path: Path) -> None:
    first = UIDS.first
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(f"root:x:0:0::/root:/bin/sh\nvm:x:{first + 3}:5::/:/bin/false\n")
    (etc / "group").write_text("root:x:0:\n")
    (etc / "subuid").write_text(f"alice:{first - 10}:11\n# a comment\nbob:100000:65536\n")
    with pytest.raises(UidRangeTaken) as taken:
        choose("auto", UIDS, tmp_path / "root", etc)  # auto too: a misconfiguration, not a lack
    assert str(taken.value.message).endswith(
        f"is in use on this host: {first + 3} of vm in /etc/passwd; "
        f"{first - 10}-{first} of alice in /etc/subuid; give the VMs ids nothing else has"
    )
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (etc / "subuid").write_text(f"alice:{first - 10}:10\n")  # ends just below the range
    (etc / "subgid").write_text(f"carol:{first + UIDS.count}:5\n")  # starts just past it
    assert choose("required", UIDS, tmp_path / "root", etc).uids is not None


def test_the_hosts_own_id_databases_leave_the_default_ranges_free() -> None:
    check_unclaimed(UIDS)
    check_unclaimed(UidRange(1_000_000_000, 65536))  # the node agent's default
    nobody = "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"
    assert claims(UidRange(65534, 1), "passwd", nobody) == ["65534 of nobody in /etc/passwd"]
