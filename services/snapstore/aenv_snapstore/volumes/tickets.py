"""Mount tickets: what lets a node agent's relay mount a sandbox's volumes on the NFS server.

The gateway asks snapstore (GrantMount) for a ticket per mount of a sandbox; the relay sends its
sandbox's tickets in the connection preamble, and the NFS server serves only the volumes those
tickets name. A ticket is an HMAC over its grant by a key only snapstore holds (kept in the
backend, so restarts and replicas share it): nothing else on the cluster network can forge one.

Format: base64url(no padding) of compact JSON `{"s","v","a","r"}` + "." + base64url(HMAC-SHA256).
Tickets are secrets: never logged, and no error message quotes one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import secrets
from dataclasses import dataclass

from aenv_common.errors import NotFound, PermissionDenied
from aenv_snapstore.backends.base import Backend

log = logging.getLogger(__name__)

KEY_OBJECT = "volumes/ticket-key"
KEY_BYTES = 32
# Far above any real grant (ids are at most 40 bytes); bounds the work a hostile ticket causes.
MAX_TICKET_CHARS = 1024


@dataclass(frozen=True)
class Grant:
    sandbox_id: str
    volume_id: str  # the volume actually served
    seen_as: str  # the volume id in the guest's handles / export path
    read_only: bool


class BadTicket(PermissionDenied):
    """A ticket that is malformed or not signed by this store's key (http 403 / PERMISSION_DENIED).
    The message never contains the ticket."""


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadTicket("malformed ticket: bad base64") from None


class TicketKey:
    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a ticket key needs at least 16 bytes")
        self._key = key

    def __repr__(self) -> str:  # never the key itself
        return "TicketKey(<secret>)"

    @classmethod
    async def load_or_create(cls, backend: Backend) -> TicketKey:
        """The key stored in the backend, created (32 random bytes) if there is none. Two replicas
        creating it at once: both read back what was stored last, so they agree."""
        try:
            return cls(await backend.get(KEY_OBJECT))
        except NotFound:
            pass
        await backend.put(KEY_OBJECT, secrets.token_bytes(KEY_BYTES))
        await backend.flush([KEY_OBJECT])
        log.info("created the volume ticket key")
        return cls(await backend.get(KEY_OBJECT))

    def _sign(self, payload: str) -> str:
        digest = hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()
        return _b64encode(digest)

    def mint(self, grant: Grant) -> str:
        body = json.dumps(
            {"s": grant.sandbox_id, "v": grant.volume_id, "a": grant.seen_as,
             "r": grant.read_only},
            separators=(",", ":"),
        )
        payload = _b64encode(body.encode("utf-8"))
        return f"{payload}.{self._sign(payload)}"

    def verify(self, ticket: str) -> Grant:
        """The grant a ticket carries; BadTicket if it is malformed or its signature is wrong."""
        if len(ticket) > MAX_TICKET_CHARS:
            raise BadTicket("malformed ticket: too long")
        payload, dot, signature = ticket.partition(".")
        if not dot or not payload or not signature:
            raise BadTicket("malformed ticket: no signature")
        if not payload.isascii() or not signature.isascii():
            raise BadTicket("malformed ticket: not ASCII")
        if not hmac.compare_digest(signature, self._sign(payload)):
            raise BadTicket("ticket signature does not match")
        return _parse_grant(_b64decode(payload))


def _parse_grant(body: bytes) -> Grant:
    try:
        fields = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise BadTicket("malformed ticket: bad grant") from None
    if not isinstance(fields, dict):
        raise BadTicket("malformed ticket: bad grant")
    sandbox_id, volume_id, seen_as, read_only = (
        fields.get("s"), fields.get("v"), fields.get("a"), fields.get("r"))
    if not (isinstance(sandbox_id, str) and isinstance(volume_id, str) and volume_id
            and isinstance(seen_as, str) and seen_as and isinstance(read_only, bool)):
        raise BadTicket("malformed ticket: bad grant")
    return Grant(sandbox_id, volume_id, seen_as, read_only)
