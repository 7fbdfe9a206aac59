"""Mount tickets: minted and verified round trip, every kind of tampering refused without the
ticket in the message, and one key shared through the backend."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.volumes.tickets import KEY_OBJECT, BadTicket, Grant, TicketKey

GRANT = Grant(sandbox_id="sbx-1", volume_id="vol-aaaaaaaaaaaaaaaaaaaa",
              seen_as="vol-bbbbbbbbbbbbbbbbbbbb", read_only=True)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_round_trip_and_format() -> None:
    key = TicketKey(b"k" * 32)
    ticket = key.mint(GRANT)
    assert key.verify(ticket) == GRANT
    assert all(c.isalnum() or c in "_.-" for c in ticket)
    payload, _, _ = ticket.partition(".")
    body = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    assert json.loads(body) == {"s": "sbx-1", "v": GRANT.volume_id, "a": GRANT.seen_as,
                                "r": True}
    assert b" " not in body  # compact


@pytest.mark.parametrize("mangle", [
    lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),           # signature changed
    lambda t: t.partition(".")[0],                                 # no signature
    lambda t: "." + t.partition(".")[2],                           # no payload
    lambda t: b64(b'{"s":"x","v":"vol-other","a":"vol-other","r":false}') + "."
    + t.partition(".")[2],                                         # payload swapped
    lambda t: t + "x" * 2000,                                      # too long
    lambda t: "é" + t,                                             # not ASCII
    lambda t: "!!!." + t.partition(".")[2],                        # not base64
])
def test_tampered_tickets_are_refused(mangle: object) -> None:
    key = TicketKey(b"k" * 32)
    ticket = key.mint(GRANT)
    bad = mangle(ticket)  # type: ignore[operator]
    with pytest.raises(BadTicket) as info:
        key.verify(bad)
    assert ticket not in info.value.message and bad not in info.value.message


def test_another_key_refuses() -> None:
    ticket = TicketKey(b"k" * 32).mint(GRANT)
    with pytest.raises(BadTicket):
        TicketKey(b"j" * 32).verify(ticket)


@pytest.mark.parametrize("body", [
    b"not json", b"[1]", b'{"s":"x","v":"","a":"a","r":false}',
    b'{"s":"x","v":"v","a":"a","r":"yes"}', b'{"s":"x","v":"v","r":false}', b"\xff\xfe",
])
def test_signed_but_malformed_grants_are_refused(body: bytes) -> None:
    key = TicketKey(b"k" * 32)
    payload = b64(body)
    with pytest.raises(BadTicket):
        key.verify(f"{payload}.{key._sign(payload)}")


def test_bad_ticket_maps_to_permission_denied() -> None:
    import grpc

    from aenv_common.status_tables import grpc_status, http_status
    assert grpc_status(BadTicket("x")) == grpc.StatusCode.PERMISSION_DENIED
    assert http_status(BadTicket("x")) == 403


def test_short_key_rejected() -> None:
    with pytest.raises(ValueError):
        TicketKey(b"short")
    assert "k" not in repr(TicketKey(b"k" * 32)).replace("TicketKey", "")


async def test_key_created_once_and_shared(tmp_path: Path) -> None:
    backend = FsBackend(tmp_path)
    try:
        first = await TicketKey.load_or_create(backend)
        stored = await backend.get(KEY_OBJECT)
        assert len(stored) == 32
        second = await TicketKey.load_or_create(FsBackend(tmp_path))
        assert second.verify(first.mint(GRANT)) == GRANT
        assert await backend.get(KEY_OBJECT) == stored
    finally:
        await backend.close()
