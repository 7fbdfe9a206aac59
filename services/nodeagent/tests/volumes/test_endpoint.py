"""Where the volume server is: asked of snapstore's VolumeService once, cached, asked again
after a failed dial forgot it; typed errors when snapstore is missing or refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from aenv.snapstore.v1 import snapstore_pb2, snapstore_pb2_grpc
from aenv_common.errors import Conflict, Internal, Unavailable
from aenv_common.grpc_server import start_grpc_server
from aenv_common.status_tables import grpc_status
from aenv_nodeagent.volumes import VolumeEndpoint
from aenv_nodeagent.volumes.endpoint import parse_address


class Volumes(snapstore_pb2_grpc.VolumeServiceServicer):
    def __init__(self) -> None:
        self.address = "10.0.0.5:2049"
        self.asked = 0

    async def GetVolumeEndpoint(self, request: Any, context: Any) -> Any:
        self.asked += 1
        if not self.address:
            raise Unavailable("the volume server is starting")
        return snapstore_pb2.GetVolumeEndpointResponse(nfs_address=self.address)


@pytest.fixture
async def snapstore() -> AsyncIterator[tuple[str, Volumes]]:
    volumes = Volumes()
    server, port = await start_grpc_server("127.0.0.1:0", [
        (snapstore_pb2_grpc.add_VolumeServiceServicer_to_server, volumes,
         "aenv.snapstore.v1.VolumeService")])
    yield f"127.0.0.1:{port}", volumes
    await server.stop(0)


async def test_asked_once_then_cached_until_forgotten(
    snapstore: tuple[str, Volumes],
) -> None:
    address, volumes = snapstore
    endpoint = VolumeEndpoint(address)
    try:
        assert await endpoint.address() == ("10.0.0.5", 2049)
        assert await endpoint.address() == ("10.0.0.5", 2049)
        assert volumes.asked == 1
        volumes.address = "[fd00::5]:20490"
        endpoint.forget()
        assert await endpoint.address() == ("fd00::5", 20490)
        assert volumes.asked == 2
    finally:
        await endpoint.close()


async def test_a_refusal_is_typed_and_not_cached(snapstore: tuple[str, Volumes]) -> None:
    address, volumes = snapstore
    volumes.address = ""
    endpoint = VolumeEndpoint(address)
    try:
        with pytest.raises(Unavailable):
            await endpoint.address()
        volumes.address = "10.0.0.6:2049"
        assert await endpoint.address() == ("10.0.0.6", 2049)
    finally:
        await endpoint.close()


async def test_no_snapstore_is_a_failed_precondition() -> None:
    endpoint = VolumeEndpoint("")
    assert not endpoint.configured
    with pytest.raises(Conflict, match="volumes need a snapstore") as caught:
        await endpoint.address()
    assert grpc_status(caught.value) == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("bad", ["", "host", "host:", ":2049", "host:0", "host:99999", "h:x"])
def test_an_address_that_is_none_is_refused(bad: str) -> None:
    with pytest.raises(Internal):
        parse_address(bad)
