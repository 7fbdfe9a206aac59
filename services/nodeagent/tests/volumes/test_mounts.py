"""A sandbox's mounts as the node hands them on: checked, the relay's preamble, envd's /init
list, and a snapshot's copy without tickets."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_nodeagent.volumes import (
    check_mounts,
    envd_mounts,
    loaded_mounts,
    preamble,
    saved_mounts,
)

TICKET = "eyJzIjoic2J4In0.c2lnbmF0dXJl-_"
VOL = "vol-abcdefghij0123456789"


def mount(path: str = "/data", ticket: str = TICKET, **fields: object) -> cluster_pb2.VolumeMount:
    defaults: dict[str, object] = {"volume_id": VOL, "name": "data"}
    return cluster_pb2.VolumeMount(path=path, ticket=ticket,
                                   **{**defaults, **fields})  # type: ignore[arg-type]


def test_the_preamble_names_every_ticket_in_order() -> None:
    assert preamble([mount(), mount("/b", ticket="t2")]) == (
        f"AENV-VOLUMES 1 {TICKET} t2\n".encode())
    assert preamble([]) == b"AENV-VOLUMES 1\n"


def test_envd_mounts_go_through_the_slots_relay() -> None:
    clone = mount("/work", volume_id="vol-clone0000000000000000", seen_as=VOL, read_only=True)
    assert envd_mounts([mount(), clone]) == [
        {"path": "/data", "server": "169.254.0.22", "port": 2049, "export": f"/{VOL}",
         "readOnly": False},
        # A copy-on-write child mounts what its parent's guest mounted: the clone stands behind.
        {"path": "/work", "server": "169.254.0.22", "port": 2049, "export": f"/{VOL}",
         "readOnly": True},
    ]


@pytest.mark.parametrize("bad", [
    [mount("data")], [mount("/data/../etc")], [mount("/")], [mount("/data/")], [mount("//d")],
    [mount("/d\nx")],
    [mount(), mount()], [mount(ticket="")], [mount(ticket="a b")], [mount(ticket="x\nAENV")],
    [mount(volume_id="VOL/../x")],
])
def test_a_mount_no_relay_could_serve_is_refused(bad: list[cluster_pb2.VolumeMount]) -> None:
    with pytest.raises(InvalidArgument) as caught:
        check_mounts(bad)
    assert TICKET not in caught.value.message


def test_tickets_beyond_the_preamble_bound_are_refused() -> None:
    many = [mount(f"/m{i}", ticket="t" * 1000) for i in range(70)]
    with pytest.raises(InvalidArgument, match="64 KiB"):
        check_mounts(many)
    check_mounts(many[:60])


def test_a_snapshot_keeps_its_mounts_without_tickets() -> None:
    mounts = [mount(), mount("/ro", read_only=True, seen_as=VOL)]
    saved = saved_mounts(mounts)
    assert TICKET not in repr(saved)
    loaded = loaded_mounts(saved)
    assert [m.ticket for m in loaded] == ["", ""]
    for original, back in zip(mounts, loaded, strict=True):
        original.ticket = ""
        assert back == original
