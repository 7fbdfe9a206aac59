"""Process output as it travels from a pipe to a Start/Connect stream, encoded without protobuf.

A chunk is both the queued item and the response message: `StartResponse` and `ConnectResponse`
share one shape, `{event: {data: {<kind>: bytes}}}`, so the encoding is written out here (JSON:
base64 in a fixed template; binary: three length-delimited fields). While it waits in a stream's
queue, a chunk keeps absorbing later reads of the same pipe, so a slow consumer gets fewer,
larger frames instead of many small ones (per-frame cost dominates under emulation).
"""

from __future__ import annotations

import binascii
import ctypes
import functools
import logging
import struct
from collections.abc import Callable

from .connect import Preencoded

log = logging.getLogger(__name__)

# Field numbers of ProcessEvent.DataEvent's `output` oneof.
_FIELDS = {"stdout": 1, "stderr": 2, "pty": 3}
# Response.event = 1, ProcessEvent.data = 2: both length-delimited (wire type 2).
_EVENT_TAG = b"\x0a"
_DATA_TAG = b"\x12"
_JSON_SUFFIX = b'"}}}'

# Writes base64 of `n` bytes of `src` at `dest` (plus a NUL), returns the encoded length.
Base64Into = Callable[[ctypes.Array[ctypes.c_char], bytes, int], int]


@functools.cache  # loaded on first use: envd's start-up stays as short as it was
def _openssl_base64() -> Base64Into | None:
    """OpenSSL's EVP_EncodeBlock (standard alphabet, padded, no newlines), when libcrypto is
    loadable: under TCG it encodes 2-3x faster than binascii (fewer guest memory operations per
    byte), and it writes straight into the frame. Checked against binascii before use."""
    try:
        libcrypto = ctypes.CDLL("libcrypto.so.3")
        encode = libcrypto.EVP_EncodeBlock
    except (OSError, AttributeError):
        return None
    encode.argtypes = [ctypes.POINTER(ctypes.c_char), ctypes.c_char_p, ctypes.c_int]
    encode.restype = ctypes.c_int
    sample = bytes(range(256)) * 3 + b"\xff"
    out = ctypes.create_string_buffer(len(sample) * 2)
    written = encode(out, sample, len(sample))
    if out.raw[:written] != binascii.b2a_base64(sample, newline=False):
        log.warning("EVP_EncodeBlock disagrees with binascii: not used")
        return None
    return encode


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class OutputChunk(Preencoded):
    """Bytes read from one output stream (stdout, stderr or pty), in order."""

    __slots__ = ("kind", "pieces", "size")

    def __init__(self, kind: str, data: bytes) -> None:
        self.kind = kind
        self.pieces = [data]
        self.size = len(data)

    def absorb(self, data: bytes) -> None:
        """Appends a later read (pieces are joined once, when the chunk is encoded)."""
        self.pieces.append(data)
        self.size += len(data)

    @property
    def data(self) -> bytes:
        if len(self.pieces) > 1:
            self.pieces = [b"".join(self.pieces)]
        return self.pieces[0]

    def envelope(self, binary: bool) -> bytes | bytearray:
        return self._binary() if binary else self._json()

    def _json(self) -> bytes | bytearray:
        data = self.data
        prefix = b'{"event":{"data":{"' + self.kind.encode() + b'":"'
        encoded_len = (len(data) + 2) // 3 * 4
        length = len(prefix) + encoded_len + len(_JSON_SUFFIX)
        header = struct.pack(">BI", 0, length)
        encode = _openssl_base64()
        if encode is None:
            encoded = binascii.b2a_base64(data, newline=False)
            return b"".join((header, prefix, encoded, _JSON_SUFFIX))
        # One buffer for the whole envelope: the base64 lands in place, nothing is copied.
        frame = bytearray(5 + length)
        start = 5 + len(prefix)
        frame[:start] = header + prefix
        # room for the encoder's NUL terminator, which the suffix then overwrites
        dest = (ctypes.c_char * (encoded_len + 1)).from_buffer(frame, start)
        encode(dest, data, len(data))
        del dest  # releases the buffer export
        frame[start + encoded_len :] = _JSON_SUFFIX
        return frame

    def _binary(self) -> bytes:
        size = self.size
        tag = bytes(((_FIELDS[self.kind] << 3) | 2,))
        data_event = 1 + len(_varint(size)) + size
        event = 1 + len(_varint(data_event)) + data_event
        head = b"".join(
            (_EVENT_TAG, _varint(event), _DATA_TAG, _varint(data_event), tag, _varint(size))
        )
        header = struct.pack(">BI", 0, len(head) + size)
        return b"".join((header, head, *self.pieces))
