"""Ending a relayed Connect server stream cleanly when its upstream breaks off.

A Connect streaming response (`application/connect+json` / `+proto`) is a sequence of
envelopes: a flag byte, a 4-byte big-endian length, the payload. Its last envelope (flag 0x02)
carries the call's status. A body broken off mid-stream leaves the client only a framing error;
E2B's proxies instead append an end-of-stream envelope with `unavailable`, so the SDKs probe the
sandbox and report it killed. That is possible only between envelopes: one half-sent cannot be
completed without inventing its bytes, so a break inside one stays a break.
"""

from __future__ import annotations

import json
import struct

CONNECT_STREAM_PREFIX = "application/connect+"
END_STREAM_FLAG = 0x02
_PREFIX_LEN = 5


def is_connect_stream(status: int, content_type: str) -> bool:
    """Whether a response can be ended with an end-of-stream envelope (a Connect unary or
    error answer has its status in the HTTP status and body, both already sent)."""
    return status == 200 and content_type.lower().startswith(CONNECT_STREAM_PREFIX)


def end_stream_envelope(code: str, message: str) -> bytes:
    payload = json.dumps({"error": {"code": code, "message": message}}).encode()
    return struct.pack(">BI", END_STREAM_FLAG, len(payload)) + payload


class EnvelopeTracker:
    """Follows the envelopes relayed so far, to tell whether the next byte starts a new one."""

    def __init__(self) -> None:
        self._prefix = bytearray()
        self._remaining = 0

    def advance(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if len(self._prefix) < _PREFIX_LEN:
                take = _PREFIX_LEN - len(self._prefix)
                self._prefix += view[:take]
                view = view[take:]
                if len(self._prefix) == _PREFIX_LEN:
                    self._remaining = int.from_bytes(self._prefix[1:], "big")
            else:
                step = min(len(view), self._remaining)
                self._remaining -= step
                view = view[step:]
            if len(self._prefix) == _PREFIX_LEN and self._remaining == 0:
                self._prefix.clear()

    @property
    def at_boundary(self) -> bool:
        return not self._prefix and self._remaining == 0
