"""The name a guest connection asks for, read from its first bytes: a TLS ClientHello's SNI or an
HTTP/1.x request's host. Pure functions over bytes, no I/O.

``sniff(data)`` says whether more bytes could change the answer (``complete``) and, once they
cannot, the name or None. The proxy feeds it what it has peeked so far and stops reading once
it is complete (or its byte and time bounds run out). Anything unexpected — garbage, a record
that is not a handshake, a ClientHello cut into nonsense, two Host headers — is complete with
no name: the connection is then judged by its address alone, never by a name it did not
clearly send.

TLS records may split one ClientHello across several records (and the peeked bytes may end
anywhere): handshake bytes are joined across consecutive handshake records before parsing.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_TLS_HANDSHAKE = 0x16
_CLIENT_HELLO = 0x01
_EXT_SERVER_NAME = 0x0000
_SNI_HOST_NAME = 0x00
_MAX_NAME = 253
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_METHOD = re.compile(rb"^[A-Z]{3,10} ")
_REQUEST_LINE = re.compile(rb"^([A-Z]{3,10}) (\S+) HTTP/1\.[01]$")


@dataclass(frozen=True)
class Sniffed:
    complete: bool  # more bytes would not change the answer
    name: str | None = None
    tls: bool = False  # the bytes are (the start of) a TLS handshake


NEED_MORE = Sniffed(complete=False)


def sniff(data: bytes) -> Sniffed:
    """The name in ``data``, the first bytes the guest sent on a connection."""
    if not data:
        return NEED_MORE
    if data[0] == _TLS_HANDSHAKE:
        return sniff_tls(data)
    if _METHOD.match(data[:11]) or (len(data) < 11 and data.isupper() and data.isalpha()):
        return sniff_http(data)
    return Sniffed(complete=True)


def sniff_tls(data: bytes) -> Sniffed:
    """SNI of a ClientHello, joined across however many handshake records it spans."""
    handshake = bytearray()
    offset = 0
    while True:
        if len(data) - offset < 5:
            return Sniffed(complete=False, tls=True)
        kind, major, length = data[offset], data[offset + 1], _u16(data, offset + 3)
        if kind != _TLS_HANDSHAKE or major != 3 or length == 0 or length > 18432:
            return Sniffed(complete=True, tls=True)
        record = data[offset + 5: offset + 5 + length]
        handshake += record
        offset += 5 + length
        if len(handshake) >= 4:
            if handshake[0] != _CLIENT_HELLO:
                return Sniffed(complete=True, tls=True)
            needed = 4 + (handshake[1] << 16 | _u16(handshake, 2))
            if len(handshake) >= needed:
                return Sniffed(complete=True, name=_client_hello_sni(bytes(handshake[4:needed])),
                               tls=True)
        if len(record) < length:
            return Sniffed(complete=False, tls=True)


def _client_hello_sni(body: bytes) -> str | None:
    """The host_name of a ClientHello body's server_name extension; None if absent or bad."""
    try:
        pos = 2 + 32  # legacy_version, random
        pos += 1 + body[pos]  # session id
        pos += 2 + _u16(body, pos)  # cipher suites
        pos += 1 + body[pos]  # compression methods
        if pos == len(body):
            return None  # no extensions
        end = pos + 2 + _u16(body, pos)
        if end > len(body):
            return None
        pos += 2
        while pos + 4 <= end:
            kind, size = _u16(body, pos), _u16(body, pos + 2)
            pos += 4
            if pos + size > end:
                return None
            if kind == _EXT_SERVER_NAME:
                return _server_name(body[pos: pos + size])
            pos += size
    except IndexError:
        return None
    return None


def _server_name(ext: bytes) -> str | None:
    if len(ext) < 2 or 2 + _u16(ext, 0) != len(ext):
        return None
    pos = 2
    while pos + 3 <= len(ext):
        kind, size = ext[pos], _u16(ext, pos + 1)
        pos += 3
        if pos + size > len(ext):
            return None
        if kind == _SNI_HOST_NAME:
            return host_name(ext[pos: pos + size])
        pos += size
    return None


def sniff_http(data: bytes, limit: int = 16384) -> Sniffed:
    """The host of an HTTP/1.x request: an absolute-form target's authority (which RFC 9112
    says wins), else its single Host header."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return Sniffed(complete=len(data) >= limit)
    lines = data[:end].split(b"\r\n")
    line = _REQUEST_LINE.match(lines[0])
    if line is None:
        return Sniffed(complete=True)
    target = line.group(2)
    if b"://" in target:
        authority = target.split(b"://", 1)[1].split(b"/", 1)[0].rsplit(b"@", 1)[-1]
        return Sniffed(complete=True, name=_host_of(authority))
    hosts = [value for key, _, value in (ln.partition(b":") for ln in lines[1:])
             if key.strip().lower() == b"host"]
    if len(hosts) != 1:
        return Sniffed(complete=True)
    return Sniffed(complete=True, name=_host_of(hosts[0].strip()))


def _host_of(authority: bytes) -> str | None:
    if authority.startswith(b"["):
        return None  # an IPv6 literal: an address, not a name
    host, _, port = authority.partition(b":")
    if port and not port.isdigit():
        return None
    return host_name(host)


def host_name(raw: bytes) -> str | None:
    """``raw`` as a lower-case DNS name without its trailing dot, or None when it is not one
    (not ASCII, a bad label, too long, or an IP address literal)."""
    try:
        name = raw.decode("ascii").lower().removesuffix(".")
    except UnicodeDecodeError:
        return None
    if not name or len(name) > _MAX_NAME or not all(_LABEL.match(lb) for lb in name.split(".")):
        return None
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name
    return None


def _u16(data: bytes | bytearray, pos: int) -> int:
    if pos + 2 > len(data):
        raise IndexError(pos)
    return data[pos] << 8 | data[pos + 1]
