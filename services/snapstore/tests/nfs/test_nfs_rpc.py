"""ONC RPC over TCP: record marking, program/version/procedure dispatch, credentials, the
preamble, pipelining, and the bounds on what a connection may send."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from aenv_snapstore.nfs import consts as c
from aenv_snapstore.nfs import server as nfs_server
from aenv_snapstore.nfs.rpc import MAX_RECORD
from aenv_snapstore.nfs.xdr import Packer, Unpacker, XdrError
from aenv_snapstore.volumes.tickets import TicketKey

from .conftest import VOL_A, Connect, grant, preamble
from .fake_volume import FakeStore
from .nfs_client import AUTH_NONE, RpcClient, call_record, fh, mark


@pytest.fixture
def store() -> FakeStore:
    """These tests slow the fake volume down at will: the fake store only."""
    fake = FakeStore()
    fake.add(VOL_A)
    return fake


def test_xdr_round_trip_and_truncation() -> None:
    data = Packer().u32(7).u64(2**40 + 3).boolean(True).opaque(b"abcde").string("hé").bytes()
    assert len(data) % 4 == 0
    u = Unpacker(data)
    assert (u.u32(), u.u64(), u.boolean(), u.opaque(), u.string()) == (
        7, 2**40 + 3, True, b"abcde", "hé")
    with pytest.raises(XdrError):
        Unpacker(Packer().u32(100).bytes()).opaque()
    with pytest.raises(XdrError):
        Unpacker(Packer().u32(2).bytes()).boolean()
    with pytest.raises(XdrError):
        Unpacker(Packer().opaque(b"x" * 10).bytes()).opaque(max_length=5)


async def test_null_on_both_programs(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    for prog, vers in ((c.NFS_PROGRAM, 3), (c.MOUNT_PROGRAM, 3)):
        reply = await client.call(prog, vers, 0, cred=(AUTH_NONE, b""))
        assert (reply.reply_stat, reply.stat, reply.body.remaining()) == (0, 0, 0)


async def test_unknown_program_version_procedure(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    assert (await client.call(100000, 2, 0)).stat == 1  # PROG_UNAVAIL (no portmapper here)
    mismatch = await client.call(c.NFS_PROGRAM, 4, 0)
    assert mismatch.stat == 2 and (mismatch.body.u32(), mismatch.body.u32()) == (3, 3)
    assert (await client.call(c.NFS_PROGRAM, 3, 22)).stat == 3  # PROC_UNAVAIL
    assert (await client.call(c.MOUNT_PROGRAM, 3, 6)).stat == 3


async def test_garbage_arguments(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    reply = await client.call(c.NFS_PROGRAM, 3, c.GETATTR, Packer().u32(1000).bytes())
    assert (reply.reply_stat, reply.stat) == (0, 4)  # GARBAGE_ARGS
    reply = await client.call(c.NFS_PROGRAM, 3, c.READ, b"\0\0")
    assert (reply.reply_stat, reply.stat) == (0, 4)


async def test_rpc_version_and_credentials_refused(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    xid = 77
    reply = await client.send(xid, call_record(xid, c.NFS_PROGRAM, 3, 0, b"", rpcvers=3))
    assert (reply.reply_stat, reply.stat, reply.body.u32(), reply.body.u32()) == (1, 0, 2, 2)
    reply = await client.call(c.NFS_PROGRAM, 3, 0, cred=(6, b"gss"))  # RPCSEC_GSS: not taken
    assert (reply.reply_stat, reply.stat, reply.body.u32()) == (1, 1, 1)  # AUTH_BADCRED


async def test_fragmented_record(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    reply = await client.call(c.NFS_PROGRAM, 3, c.GETATTR, fh(root).bytes(), fragments=7)
    assert reply.stat == 0 and reply.body.u32() == c.NFS3_OK
    # An empty first fragment is legal too.
    xid = 900
    client.writer.write(mark(b"", last=False))
    future = client.send(xid, call_record(xid, c.NFS_PROGRAM, 3, 0, b""))
    assert (await asyncio.wait_for(future, 5)).stat == 0


async def test_oversize_record_closes_the_connection(connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    client.writer.write(mark(b"x" * 1024, last=False))
    client.writer.write(mark(b"x" * MAX_RECORD))  # the sum is over the bound
    assert await client.closed()
    # Other connections are unaffected.
    other = await connect(grant(VOL_A))
    assert (await other.call(c.NFS_PROGRAM, 3, 0)).stat == 0


async def test_pipelined_calls_run_concurrently_and_answer_by_xid(
        connect: Connect, store: FakeStore) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    store.volumes[VOL_A].delay_s = 0.3
    started = time.monotonic()
    replies = await asyncio.gather(*(
        client.call(c.NFS_PROGRAM, 3, c.GETATTR, fh(root).bytes()) for _ in range(40)))
    assert time.monotonic() - started < 3.0  # serially: 12 s
    assert len({r.xid for r in replies}) == 40
    for reply in replies:
        assert reply.body.u32() == c.NFS3_OK


async def test_replies_come_in_completion_order(connect: Connect, store: FakeStore) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    store.volumes[VOL_A].delay_s = 0.5
    slow = asyncio.ensure_future(client.call(c.NFS_PROGRAM, 3, c.GETATTR, fh(root).bytes()))
    await asyncio.sleep(0.05)
    fast = await client.call(c.NFS_PROGRAM, 3, c.NULL)  # no volume call: not delayed
    assert fast.stat == 0 and not slow.done()
    assert (await slow).body.u32() == c.NFS3_OK


@pytest.mark.parametrize("raw", [
    b"AENV-VOLUMES 1 not-a-valid-ticket\n",
    b"AENV-VOLUMES 2\n",
    b"HELLO 1\n",
    b"AENV-VOLUMES 1 bad*chars\n",
    b"AENV-VOLUMES  1\n",
    b"\xff\xfe\n",
])
async def test_bad_preamble_closes_the_connection(connect: Connect, raw: bytes) -> None:
    client = await connect(raw=raw)
    assert await client.closed()


async def test_ticket_from_another_key_closes_the_connection(
        connect: Connect) -> None:
    forged = TicketKey(b"z" * 32).mint(grant(VOL_A))
    client = await connect(raw=f"AENV-VOLUMES 1 {forged}\n".encode())
    assert await client.closed()


async def test_one_bad_ticket_among_good_ones_closes(connect: Connect, key: TicketKey) -> None:
    good = key.mint(grant(VOL_A))
    client = await connect(raw=f"AENV-VOLUMES 1 {good} {good[:-2]}xx\n".encode())
    assert await client.closed()


async def test_oversize_preamble_closes(connect: Connect) -> None:
    client = await connect(raw=b"AENV-VOLUMES 1 " + b"a" * (80 * 1024) + b"\n")
    assert await client.closed()


async def test_preamble_timeout(connect: Connect, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nfs_server, "PREAMBLE_TIMEOUT_S", 0.2)
    client = await connect(raw=b"AENV-VOLUMES 1")  # no newline, ever
    assert await client.closed(within_s=3)


async def test_zero_tickets_mounts_nothing(connect: Connect) -> None:
    client = await connect()
    assert (await client.call(c.NFS_PROGRAM, 3, 0)).stat == 0
    reply = await client.call(c.MOUNT_PROGRAM, 3, c.MNT_MNT, Packer().string("/" + VOL_A).bytes())
    assert reply.body.u32() == c.MNT3ERR_ACCES


async def test_close_ends_connections(server: tuple[nfs_server.NfsServer, tuple[str, int]],
                                      connect: Connect) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    body = await client.nfs(c.GETATTR, fh(root).bytes())
    assert body.u32() == c.NFS3_OK
    assert server[0].open_connections == 1
    await server[0].close()
    assert await client.closed()
    assert server[0].open_connections == 0


async def test_logs_never_hold_tickets(connect: Connect, key: TicketKey,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    good = key.mint(grant(VOL_A))
    client = await connect(raw=f"AENV-VOLUMES 1 {good}\n".encode())
    assert (await client.call(c.NFS_PROGRAM, 3, 0)).stat == 0
    bad = good[:-4] + "AAAA"
    refused = await connect(raw=f"AENV-VOLUMES 1 {good} {bad}\n".encode())
    assert await refused.closed()
    text = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "bad preamble" in text and VOL_A in text
    assert good not in text and bad not in text and good.split(".")[1] not in text


async def test_calls_in_flight_finish_when_the_client_leaves(
        connect: Connect, store: FakeStore) -> None:
    client = await connect(grant(VOL_A))
    root = await client.mount("/" + VOL_A)
    volume = store.volumes[VOL_A]
    made = await volume.create(1, "f", mode=0o644, uid=0, gid=0, exclusive=True)
    handle = root[:-8] + made.ino.to_bytes(8, "big")
    volume.delay_s = 0.3
    args = fh(handle).u64(0).u32(4).u32(c.UNSTABLE).opaque(b"data").bytes()
    client.send(5000, call_record(5000, c.NFS_PROGRAM, 3, c.WRITE, args))
    await asyncio.sleep(0.05)
    await client.close()
    await asyncio.sleep(0.6)
    assert bytes(volume.nodes[made.ino].data) == b"data"


async def test_observer_hook(store: FakeStore, key: TicketKey) -> None:
    seen: list[tuple[str, str, int | None]] = []
    nfs = nfs_server.NfsServer(store, key, observe=lambda p, n, s, _t: seen.append((p, n, s)))
    address = await nfs.start("127.0.0.1", 0)
    client = await RpcClient.connect(address, preamble(key, grant(VOL_A)))
    try:
        root = await client.mount("/" + VOL_A)
        await client.nfs(c.GETATTR, fh(root).bytes())
        await client.nfs(c.LOOKUP, fh(root).string("missing").bytes())
    finally:
        await client.close()
        await nfs.close()
    assert seen == [("mount", "MNT", None), ("nfs", "GETATTR", c.NFS3_OK),
                    ("nfs", "LOOKUP", c.NFS3ERR_NOENT)]
