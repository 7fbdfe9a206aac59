"""Where the volume server's NFS port is: asked of snapstore (``VolumeService.GetVolumeEndpoint``)
when a relay first needs it, then cached. A dial that fails forgets it, so a volume server that
moved (a snapstore restarted on another port) is asked again by the next connection."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from aenv.snapstore.v1 import snapstore_pb2, snapstore_pb2_grpc
from aenv_common.errors import Conflict, Internal
from aenv_common.status_tables import from_rpc_error

NO_SNAPSTORE = "volumes need a snapstore: this node has no snapstore_address"


class VolumeEndpoint:
    def __init__(self, snapstore_address: str, timeout_s: float = 5.0) -> None:
        self._snapstore = snapstore_address
        self._timeout_s = timeout_s
        self._cached: tuple[str, int] | None = None
        self._channel: grpc.aio.Channel | None = None
        self._lock = asyncio.Lock()

    @property
    def configured(self) -> bool:
        return bool(self._snapstore)

    def require(self) -> None:
        """:raise Conflict: no snapstore (FAILED_PRECONDITION): no sandbox can mount here."""
        if not self._snapstore:
            raise Conflict(NO_SNAPSTORE)

    async def address(self) -> tuple[str, int]:
        """(host, port) of the NFS server.

        :raise Conflict: no snapstore. :raise AenvError: snapstore did not say (typed).
        """
        self.require()
        if (cached := self._cached) is not None:
            return cached
        async with self._lock:
            if self._cached is None:
                self._cached = parse_address(await self._ask())
            return self._cached

    def forget(self) -> None:
        self._cached = None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _ask(self) -> str:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._snapstore)
        stub: Any = snapstore_pb2_grpc.VolumeServiceStub(self._channel)  # type: ignore[no-untyped-call]
        try:
            reply = await stub.GetVolumeEndpoint(snapstore_pb2.GetVolumeEndpointRequest(),
                                                 timeout=self._timeout_s)
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        return str(reply.nfs_address)


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``.

    :raise Internal: not an address.
    """
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Internal(f"snapstore advertised an invalid NFS address {address!r}")
    return host, int(port)
