"""The body of GET /files, as upstream envd serves it (Go's `http.ServeContent`, plus gzip when
asked for and worth it): Content-Type from the file's extension, Last-Modified and
If-Modified-Since (304), and a single byte range (206, or 416 past the end) — so a signed
download URL resumes with `curl -C -` and seeks in a browser. Ranges and conditional requests
are answered uncompressed, as upstream does.

Pseudo files (procfs, sysfs) have no trustworthy size: a short one is read to EOF first (its
length is what was read), a long one is served whole.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import re
import stat
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

DISK_CHUNK = 1024 * 1024
_SAMPLE = 64 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_CONDITIONAL = ("range", "if-modified-since", "if-none-match", "if-range")


def accepts_gzip(header: str) -> bool:
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


async def download(request: Request, fd: int, path: str, gzip_level: int) -> Response:
    """The response for the open file `fd` (which it closes, now or when the body ends).

    :raise OSError: the file cannot be read.
    """
    try:
        head, length = await asyncio.to_thread(_read_head, fd)
        mtime = os.fstat(fd).st_mtime
    except OSError:
        os.close(fd)
        raise
    headers = {"content-type": mimetypes.guess_type(path)[0] or "application/octet-stream"}
    if length is not None:
        headers |= {"accept-ranges": "bytes", "last-modified": _http_date(mtime)}
        early = _conditional(request, mtime, length, headers)
        if early is not None:
            os.close(fd)
            return early
        span = _range(request, mtime, length)
        if span is not None:  # satisfiable, or _conditional would have answered 416
            start, end = span
            headers |= {"content-range": f"bytes {start}-{end}/{length}",
                        "content-length": str(end - start + 1)}
            body = _read_span(fd, head, start, end - start + 1)
            return StreamingResponse(body, status_code=206, headers=headers)
    plain = any(name in request.headers for name in _CONDITIONAL)
    gzip_accepted = not plain and accepts_gzip(request.headers.get("accept-encoding", ""))
    if gzip_accepted:
        headers["vary"] = "Accept-Encoding"
    body = _read_chunks(fd, head, length)
    if gzip_accepted and _compressible(head, gzip_level):
        headers["content-encoding"] = "gzip"
        body = _gzip_stream(body, gzip_level)
    elif length is not None:
        headers["content-length"] = str(length)
    return StreamingResponse(body, headers=headers)


def _conditional(
    request: Request, mtime: float, length: int, headers: dict[str, str]
) -> Response | None:
    """304 for an unchanged file, 416 for a range it cannot satisfy; None: serve it."""
    since = _parse_date(request.headers.get("if-modified-since"))
    if since is not None and "if-none-match" not in request.headers and int(mtime) <= since:
        return Response(status_code=304, headers={"last-modified": headers["last-modified"]})
    span = _range(request, mtime, length)
    if span is not None and not 0 <= span[0] <= span[1] < length:
        return Response(status_code=416, headers={"content-range": f"bytes */{length}"})
    return None


def _range(request: Request, mtime: float, length: int) -> tuple[int, int] | None:
    """The one byte range asked for, inclusive (empty or past the end when unsatisfiable), or
    None for the whole file: no Range, an If-Range naming another version, several ranges, a
    form we do not read, or an empty file."""
    span = request.headers.get("range")
    if not span or length == 0:
        return None
    if_range = request.headers.get("if-range")
    if if_range is not None and _parse_date(if_range) != int(mtime):
        return None
    match = _RANGE.match(span.strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # the last N bytes
        return max(length - int(last), 0), length - 1 if int(last) else -1
    return int(first), min(int(last), length - 1) if last else length - 1


def _http_date(mtime: float) -> str:
    return format_datetime(datetime.fromtimestamp(int(mtime), UTC), usegmt=True)


def _parse_date(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError):
        return None


def _read_head(fd: int) -> tuple[bytes, int | None]:
    """The file's first chunk and the body length, or None when only reading to EOF tells.

    Pseudo files report a size unrelated to what they hold (procfs 0, sysfs 4096), so a
    short file is read to EOF and its length is what was read; the size stat reports is only
    believed for a regular file that occupies disk blocks and is not shorter than its head."""
    head = os.read(fd, DISK_CHUNK)
    if len(head) < DISK_CHUNK:
        more = os.read(fd, DISK_CHUNK)
        if not more:
            return head, len(head)
        head += more
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_blocks > 0 and info.st_size >= len(head):
        return head, info.st_size
    return head, None


async def _read_chunks(fd: int, head: bytes, length: int | None) -> AsyncIterator[bytes]:
    """`head`, then the rest of the file to EOF, never more than a declared `length` (a file
    growing during the download must not overrun its Content-Length)."""
    try:
        remaining = length
        chunk = head
        while chunk:
            if remaining is not None:
                if len(chunk) > remaining:
                    chunk = chunk[:remaining]
                remaining -= len(chunk)
            if chunk:
                yield chunk
            if remaining == 0:
                return
            chunk = await asyncio.to_thread(os.read, fd, DISK_CHUNK)
    finally:
        os.close(fd)


async def _read_span(fd: int, head: bytes, start: int, count: int) -> AsyncIterator[bytes]:
    """`count` bytes from `start`: from `head` when it holds them (a short file, pseudo files
    included, is all in it), else read at that offset."""
    try:
        if start + count <= len(head):
            yield head[start:start + count]
            return
        while count > 0:
            chunk = await asyncio.to_thread(os.pread, fd, min(DISK_CHUNK, count), start)
            if not chunk:
                return
            yield chunk
            start, count = start + len(chunk), count - len(chunk)
    finally:
        os.close(fd)


def _compressible(head: bytes, level: int) -> bool:
    """gzip is only worth its CPU (the guest's, scarce under emulation) when the file's start
    shrinks: compressed or random data is sent as it is, which HTTP allows whatever the client
    accepts."""
    sample = head[:_SAMPLE]
    return len(sample) > 0 and len(zlib.compress(sample, level)) < len(sample) * 0.9


async def _gzip_stream(chunks: AsyncIterator[bytes], level: int) -> AsyncIterator[bytes]:
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    async for chunk in chunks:
        if out := compressor.compress(chunk):
            yield out
    yield compressor.flush()
