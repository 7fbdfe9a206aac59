"""XDR (RFC 4506): the big-endian, 4-byte-aligned encoding every ONC RPC message is made of.

Only the shapes NFSv3 and MOUNTv3 use: 32/64-bit integers, booleans, fixed and variable opaque
data, strings. Decoding never trusts a length: one past the end of the message is XdrError, which
the RPC layer answers with GARBAGE_ARGS.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")


class XdrError(ValueError):
    """The bytes are not the XDR shape expected (truncated, a bad bool, a length out of range)."""


def _pad(length: int) -> int:
    return -length % 4


class Packer:
    """Appends XDR items to a list of byte strings, joined once at the end (no quadratic copy)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def u32(self, value: int) -> Packer:
        self._parts.append(_U32.pack(value & 0xFFFFFFFF))
        return self

    def i32(self, value: int) -> Packer:
        self._parts.append(_I32.pack(value))
        return self

    def u64(self, value: int) -> Packer:
        self._parts.append(_U64.pack(value & 0xFFFFFFFFFFFFFFFF))
        return self

    def boolean(self, value: bool) -> Packer:
        return self.u32(1 if value else 0)

    def fixed(self, data: bytes) -> Packer:
        """Fixed-length opaque: the bytes and their padding, no length."""
        self._parts.append(data)
        if pad := _pad(len(data)):
            self._parts.append(b"\0" * pad)
        return self

    def opaque(self, data: bytes) -> Packer:
        """Variable-length opaque: a length, the bytes, the padding."""
        self.u32(len(data))
        return self.fixed(data)

    def string(self, text: str) -> Packer:
        return self.opaque(text.encode("utf-8", "surrogateescape"))

    def raw(self, data: bytes) -> Packer:
        """Bytes already XDR-encoded (a nested structure built by another Packer)."""
        self._parts.append(data)
        return self

    def size(self) -> int:
        return sum(len(part) for part in self._parts)

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class Unpacker:
    def __init__(self, data: bytes | memoryview, offset: int = 0) -> None:
        self._data = memoryview(data)
        self._pos = offset

    @property
    def position(self) -> int:
        return self._pos

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def _take(self, count: int) -> memoryview:
        end = self._pos + count
        if count < 0 or end > len(self._data):
            raise XdrError("truncated XDR data")
        view = self._data[self._pos : end]
        self._pos = end
        return view

    def u32(self) -> int:
        return int(_U32.unpack(self._take(4))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def u64(self) -> int:
        return int(_U64.unpack(self._take(8))[0])

    def boolean(self) -> bool:
        value = self.u32()
        if value > 1:
            raise XdrError(f"bad XDR bool {value}")
        return value == 1

    def fixed(self, length: int) -> bytes:
        data = bytes(self._take(length))
        self._take(_pad(length))
        return data

    def opaque(self, max_length: int | None = None) -> bytes:
        length = self.u32()
        if max_length is not None and length > max_length:
            raise XdrError(f"XDR opaque of {length} bytes, at most {max_length} allowed")
        return self.fixed(length)

    def opaque_view(self, max_length: int | None = None) -> memoryview:
        """Variable-length opaque without a copy (WRITE's data: up to 1 MiB)."""
        length = self.u32()
        if max_length is not None and length > max_length:
            raise XdrError(f"XDR opaque of {length} bytes, at most {max_length} allowed")
        view = self._take(length)
        self._take(_pad(length))
        return view

    def string(self, max_length: int | None = None) -> str:
        return self.opaque(max_length).decode("utf-8", "surrogateescape")
