"""A restarted node agent starts the volume relay of each adopted sandbox that mounts volumes
again, from its record (the last one died with the last agent), even while snapstore cannot say
where the volume server is (its first connection asks)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import NetworkConfig
from aenv_nodeagent.network.slots import slot_for
from aenv_nodeagent.restart.recovery import Adopted, restore_relays

from ..fakes.volumes import FakeNfsServer, FixedEndpoint, loopback_relays

TICKET = "tk.adopted-1"


def adopted(index: int, mounts: list[cluster_pb2.VolumeMount]) -> Adopted:
    record = cluster_pb2.SandboxRecord(sandbox_id=f"sb{index}", volume_mounts=mounts)
    return Adopted(record, Path("/nonexistent"), slot_for(NetworkConfig(), index),
                   cast(Any, None))


def mount(ticket: str = TICKET) -> cluster_pb2.VolumeMount:
    return cluster_pb2.VolumeMount(path="/data", volume_id="vol-x", ticket=ticket)


async def test_adopted_sandboxes_with_mounts_get_their_relays_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nfs = await FakeNfsServer().start()
    relays = loopback_relays(nfs.address)
    endpoint = relays.endpoint
    assert isinstance(endpoint, FixedEndpoint)
    try:
        found = [adopted(1, [mount()]), adopted(2, []), adopted(3, [mount("bad ticket")]),
                 adopted(4, [mount("tk.four")])]
        await restore_relays(found, relays)
        assert sorted(relays.running()) == ["aenv-1", "aenv-4"]
        assert endpoint.asked == 0  # not before a guest connects
        assert "volume relay of an adopted sandbox not restored" in caplog.text
        assert "bad ticket" not in caplog.text

        relay = relays.running()["aenv-1"]
        host, port = relay._listener.getsockname()[:2]
        reader, writer = await asyncio.open_connection(host, port)  # the guest dials again
        writer.write(b"z")
        assert await reader.readexactly(1) == b"z"
        assert nfs.preambles == [f"AENV-VOLUMES 1 {TICKET}\n".encode()]
        writer.close()
    finally:
        await relays.close()
        await nfs.stop()


async def test_without_snapstore_adopted_mounts_are_logged_and_nothing_else_breaks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR)
    await restore_relays([adopted(1, [mount()]), adopted(2, [])], None)
    assert "volume relay of an adopted sandbox not restored" in caplog.text
    assert TICKET not in caplog.text
