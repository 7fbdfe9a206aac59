"""What a webhook receives: E2B's event JSON, signed as E2B signs it.

The body is the event exactly as E2B's events API answers it here (events/wire.py: `id`,
`version`, `type`, `eventData` with `sandbox_metadata` and aenv's `aenv_*` words, `sandboxId`,
`sandboxTemplateId`, `sandboxTeamId`, `timestamp`, ...). The `e2b-signature` header is the
unpadded base64 of SHA-256 over the signature secret followed by the raw body, as E2B's docs give
it, so a receiver written for E2B verifies ours unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.events import E2B_NAMES
from aenv_gateway.core.events.wire import e2b_event

SIGNATURE_VERSION = "v1"
# Every type a webhook may subscribe to (E2B's names).
E2B_TYPES_SUBSCRIBABLE = E2B_NAMES


def body(event: c.SandboxEvent, e2b_name: str) -> bytes:
    """The delivery's raw body (what the signature covers)."""
    return json.dumps(e2b_event(event) | {"type": e2b_name}, separators=(",", ":")).encode()


def signature(secret: str, raw_body: bytes) -> str:
    """E2B's `e2b-signature`: base64(SHA-256(secret + body)) without its `=` padding."""
    digest = hashlib.sha256(secret.encode() + raw_body).digest()
    return base64.b64encode(digest).decode().rstrip("=")
