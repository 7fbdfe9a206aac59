"""Streaming multipart/form-data parser: parts arrive as events, bodies are never held whole."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import invalid_argument

MAX_HEADER_BYTES = 16 * 1024


@dataclass(frozen=True)
class PartStart:
    headers: dict[str, str]  # lower-cased names


@dataclass(frozen=True)
class PartData:
    data: bytes | memoryview  # a view of the fed chunk when it could be passed on uncopied


@dataclass(frozen=True)
class PartEnd:
    pass


MultipartEvent = PartStart | PartData | PartEnd


def parse_header_params(value: str) -> tuple[str, dict[str, str]]:
    """`form-data; name="file"; filename="/a b.txt"` -> ("form-data", {...}); quotes kept raw."""
    head, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i] in " ;\t":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        key = rest[i:eq].strip().lower()
        i = eq + 1
        if i < len(rest) and rest[i] == '"':
            i += 1
            chars: list[str] = []
            while i < len(rest) and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < len(rest):
                    i += 1
                chars.append(rest[i])
                i += 1
            i += 1
            params[key] = "".join(chars)
        else:
            end = rest.find(";", i)
            end = len(rest) if end < 0 else end
            params[key] = rest[i:end].strip()
            i = end
    return head.strip().lower(), params


class MultipartParser:
    def __init__(self, boundary: str) -> None:
        if not boundary:
            raise invalid_argument("multipart boundary is missing")
        self._first = b"--" + boundary.encode()
        self._delimiter = b"\r\n--" + boundary.encode()
        self._buffer = bytearray()
        self._state = "preamble"  # preamble | headers | body | after_delimiter | done

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, chunk: bytes) -> list[MultipartEvent]:
        events: list[MultipartEvent] = []
        if self._state == "body" and len(chunk) >= len(self._delimiter):
            # File bodies are nearly all of an upload: scan each chunk where it lies and pass
            # views of it on, instead of appending it to the buffer and slicing copies out.
            chunk = self._body_chunk(chunk, events)
            if not chunk:
                return events
        self._buffer += chunk
        while self._step(events):
            pass
        return events

    def _body_chunk(self, chunk: bytes, events: list[MultipartEvent]) -> bytes:
        """Body bytes of `chunk` become events; returns what follows the delimiter, if found.

        Invariant in the body state: the buffer holds less than a delimiter, the tail of the
        previous chunk that could be the start of one; the chunk is at least a delimiter long."""
        delimiter = self._delimiter
        size = len(delimiter)
        tail = self._buffer
        if tail:
            # A delimiter starting in the tail ends within the first size-1 bytes of the chunk.
            index = (bytes(tail) + chunk[: size - 1]).find(delimiter)
            if 0 <= index < len(tail):
                if index:
                    events.append(PartData(bytes(tail[:index])))
                events.append(PartEnd())
                rest = chunk[index + size - len(tail) :]
                tail.clear()
                self._state = "after_delimiter"
                return rest
            events.append(PartData(bytes(tail)))
            tail.clear()
        view = memoryview(chunk)
        index = chunk.find(delimiter)
        if index >= 0:
            if index:
                events.append(PartData(view[:index]))
            events.append(PartEnd())
            self._state = "after_delimiter"
            return chunk[index + size :]
        safe = len(chunk) - size + 1
        if safe > 0:
            events.append(PartData(view[:safe]))
        tail += view[max(safe, 0) :]
        return b""

    def _step(self, events: list[MultipartEvent]) -> bool:
        buf = self._buffer
        if self._state == "preamble":
            index = buf.find(self._first)
            if index < 0:
                del buf[: max(0, len(buf) - len(self._first))]
                return False
            del buf[: index + len(self._first)]
            self._state = "after_delimiter"
            return True
        if self._state == "after_delimiter":
            if len(buf) < 2:
                return False
            if buf[:2] == b"--":
                self._state = "done"
                buf.clear()
                return False
            if buf[:2] != b"\r\n":
                raise invalid_argument("malformed multipart body")
            del buf[:2]
            self._state = "headers"
            return True
        if self._state == "headers":
            index = buf.find(b"\r\n\r\n")
            if index < 0:
                if len(buf) > MAX_HEADER_BYTES:
                    raise invalid_argument("multipart part headers too large")
                return False
            events.append(PartStart(_parse_headers(bytes(buf[:index]))))
            del buf[: index + 4]
            self._state = "body"
            return True
        if self._state == "body":
            index = buf.find(self._delimiter)
            if index < 0:
                # Keep a tail that could be the start of the delimiter.
                safe = len(buf) - len(self._delimiter) + 1
                if safe > 0:
                    events.append(PartData(bytes(buf[:safe])))
                    del buf[:safe]
                return False
            if index:
                events.append(PartData(bytes(buf[:index])))
            events.append(PartEnd())
            del buf[: index + len(self._delimiter)]
            self._state = "after_delimiter"
            return True
        return False


def _parse_headers(raw: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in raw.decode("utf-8", errors="replace").split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers
