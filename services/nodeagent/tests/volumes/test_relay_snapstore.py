"""The relay against the real volume server (snapstore in process, filesystem backend, NFS on
loopback): the address comes from GetVolumeEndpoint, a ticket from GrantMount opens MOUNT3 for
the granted volume through the relay, and a relay presenting a forged ticket is shut out."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.snapstore.v1 import snapstore_pb2, snapstore_pb2_grpc
from aenv_nodeagent.volumes import VolumeEndpoint, VolumeRelays
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore

from ..fakes.volumes import loopback_listener

VOL = "vol-relaytest0000000000"
MOUNT_PROG, MOUNT_VERS, MNT = 100005, 3, 1
NFS_PROG, NFS_VERS = 100003, 3


@pytest.fixture
async def snapstore(tmp_path: Path) -> AsyncIterator[str]:
    running = await start_snapstore(SnapstoreSettings(
        listen="127.0.0.1:0", gc_interval_seconds=0, fs_root=tmp_path / "store",
        volume_nfs_listen="127.0.0.1:0", volume_work_dir=tmp_path / "volumes"))
    try:
        yield f"127.0.0.1:{running.port}"
    finally:
        await running.stop(grace=0)


async def grant(address: str) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        stub: Any = snapstore_pb2_grpc.VolumeServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.CreateVolume(snapstore_pb2.CreateVolumeRequest(volume_id=VOL))
        reply = await stub.GrantMount(snapstore_pb2.GrantMountRequest(
            sandbox_id="sbxrelay", volume_id=VOL, seen_as=VOL))
        return str(reply.ticket)


def _xdr_string(value: bytes) -> bytes:
    pad = (4 - len(value) % 4) % 4
    return struct.pack(">I", len(value)) + value + b"\0" * pad


def rpc_call(xid: int, prog: int, vers: int, proc: int, args: bytes) -> bytes:
    """One ONC RPC call in one record-marked fragment, AUTH_SYS as root."""
    cred = struct.pack(">I", 0) + _xdr_string(b"guest") + struct.pack(">III", 0, 0, 0)
    body = (struct.pack(">IIIIII", xid, 0, 2, prog, vers, proc)
            + struct.pack(">I", 1) + _xdr_string(cred) + struct.pack(">II", 0, 0) + args)
    return struct.pack(">I", 0x80000000 | len(body)) + body


async def rpc_reply(reader: asyncio.StreamReader) -> bytes:
    (mark,) = struct.unpack(">I", await reader.readexactly(4))
    return await reader.readexactly(mark & 0x7FFFFFFF)


async def mount_through(relays: VolumeRelays, netns: str) -> tuple[int, int] | None:
    """MNT /<VOL> through the relay: (accept_stat, mount status), None if the relay closed."""
    host, port = relays.running()[netns]._listener.getsockname()[:2]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(rpc_call(7, MOUNT_PROG, MOUNT_VERS, MNT, _xdr_string(f"/{VOL}".encode())))
        try:
            reply = await asyncio.wait_for(rpc_reply(reader), 10)
        except asyncio.IncompleteReadError:
            return None
        xid, msg_type, reply_stat = struct.unpack(">III", reply[:12])
        assert (xid, msg_type, reply_stat) == (7, 1, 0)
        verf_len = struct.unpack(">I", reply[16:20])[0]
        offset = 20 + verf_len + (4 - verf_len % 4) % 4
        accept_stat, status = struct.unpack(">II", reply[offset:offset + 8])
        return accept_stat, status
    finally:
        writer.close()


async def test_a_granted_ticket_mounts_through_the_relay_and_a_forged_one_does_not(
    snapstore: str,
) -> None:
    ticket = await grant(snapstore)
    relays = VolumeRelays(VolumeEndpoint(snapstore), open_listener=loopback_listener)
    try:
        good = [cluster_pb2.VolumeMount(path="/data", volume_id=VOL, ticket=ticket)]
        await relays.start("good", good)
        assert await mount_through(relays, "good") == (0, 0)  # SUCCESS, MNT3_OK

        body, _, signature = ticket.rpartition(".")
        forged = f"{body}.{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
        await relays.start("forged", [cluster_pb2.VolumeMount(path="/data", volume_id=VOL,
                                                              ticket=forged)])
        assert await mount_through(relays, "forged") is None
    finally:
        await relays.close()
