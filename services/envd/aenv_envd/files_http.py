"""GET/POST /files: streamed downloads (the body: files_download.py) and uploads (spec §3.6.2,
§3.6.3).

As upstream envd, both act as envd (root) whoever the caller is: the VM is the boundary (the
default `user` may sudo anyway). An upload gives the caller its file and the parents it had to
make; parents that existed are left as they are. An unknown user is refused."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .entry_info import XATTR_UNSUPPORTED, metadata_problem, read_metadata, write_metadata
from .errors import EnvdError, NoSpace, UnsupportedEncoding, invalid_argument
from .files_download import DISK_CHUNK, download
from .multipart import MultipartParser, PartData, PartEnd, PartStart, parse_header_params
from .signing import signature_error
from .state import SandboxState
from .status_table import http_status
from .users import User, chown_to, make_dirs_owned, os_error_to_envd, resolve_path

log = logging.getLogger(__name__)

# writev takes at most IOV_MAX (1024) pieces at once.
MAX_PIECES = 512
METADATA_HEADER_PREFIX = "x-metadata-"


def http_error(error: EnvdError) -> JSONResponse:
    status = http_status(error)
    return JSONResponse({"code": status, "message": error.message}, status)


class FilesEndpoint:
    def __init__(self, state: SandboxState, gzip_level: int) -> None:
        self._state = state
        self._gzip_level = gzip_level

    def _authorize(self, request: Request, operation: str) -> None:
        token = self._state.access_token
        if not token:
            return
        # An empty header counts as absent, as upstream (Go's Header.Get) sees it.
        presented = request.headers.get("x-access-token")
        if presented:
            if self._state.token_matches(presented):
                return
            raise EnvdError("unauthenticated", "access token present in header but does not match")
        query = request.query_params
        refusal = signature_error(
            query.get("signature"),
            query.get("signature_expiration"),
            query.get("path", ""),
            operation,
            query.get("username", ""),
            token,
        )
        if refusal is not None:
            raise EnvdError("unauthenticated", refusal)

    def _user(self, request: Request) -> User:
        return self._state.resolve_user(request.query_params.get("username") or None)

    # ----- download ----------------------------------------------------------------------------

    async def get(self, request: Request) -> Response:
        try:
            self._authorize(request, "read")
            user = self._user(request)
            path = resolve_path(
                request.query_params.get("path", ""), user, self._state.default_workdir
            )
            try:
                fd = _open_streamable(path, os.O_RDONLY)
            except OSError as exc:
                raise os_error_to_envd(exc, path) from exc
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.close(fd)
                raise invalid_argument(f"path '{path}' is a directory")
        except EnvdError as exc:
            return http_error(exc)
        try:
            return await download(request, fd, path, self._gzip_level)
        except OSError as exc:
            return http_error(os_error_to_envd(exc, path))

    # ----- upload ------------------------------------------------------------------------------

    async def post(self, request: Request) -> Response:
        try:
            self._authorize(request, "write")
            user = self._user(request)
            metadata = _metadata_headers(request)
            media, params = parse_header_params(request.headers.get("content-type", ""))
            if media == "multipart/form-data":
                written = await self._multipart(request, params.get("boundary", ""), user, metadata)
            elif media == "application/octet-stream":
                written = [await self._octet_stream(request, user, metadata)]
            else:
                raise invalid_argument(f"unsupported content type '{media}'")
        except EnvdError as exc:
            return http_error(exc)
        return JSONResponse([w.as_json() for w in written])

    def _target(self, raw_path: str, user: User) -> str:
        if not raw_path:
            raise invalid_argument("upload path is missing")
        return resolve_path(raw_path, user, self._state.default_workdir)

    async def _octet_stream(
        self, request: Request, user: User, metadata: dict[str, str] | None
    ) -> WrittenFile:
        path = self._target(request.query_params.get("path", ""), user)
        upload = FileUpload.open(path, user)
        try:
            async for chunk in _decoded_body(request):
                await upload.write(chunk)
            return await upload.finish(metadata)
        finally:
            upload.close()

    async def _multipart(
        self, request: Request, boundary: str, user: User, metadata: dict[str, str] | None
    ) -> list[WrittenFile]:
        parser = MultipartParser(boundary)
        query_path = request.query_params.get("path")
        written: list[WrittenFile] = []
        seen: set[str] = set()
        upload: FileUpload | None = None
        try:
            async for chunk in _decoded_body(request):
                for event in parser.feed(chunk):
                    if isinstance(event, PartStart):
                        upload = self._start_part(event, query_path, user, seen)
                    elif isinstance(event, PartData) and upload is not None:
                        await upload.write(event.data)
                    elif isinstance(event, PartEnd) and upload is not None:
                        written.append(await upload.finish(metadata))
                        upload.close()
                        upload = None
        finally:
            if upload is not None:
                upload.close()
        if not parser.done:
            raise invalid_argument("multipart body ended early")
        if not written:
            raise invalid_argument("no file part in the multipart body")
        return written

    def _start_part(
        self, part: PartStart, query_path: str | None, user: User, seen: set[str]
    ) -> FileUpload | None:
        _, params = parse_header_params(part.headers.get("content-disposition", ""))
        if params.get("name") != "file":
            return None
        raw_path = query_path if query_path and not seen else params.get("filename", "")
        path = self._target(raw_path, user)
        if path in seen:
            raise invalid_argument(f"path '{path}' is uploaded more than once")
        seen.add(path)
        return FileUpload.open(path, user)


@dataclass
class WrittenFile:
    path: str
    metadata: dict[str, str] | None = None

    def as_json(self) -> dict[str, object]:
        result: dict[str, object] = {
            "name": os.path.basename(self.path),
            "type": "file",
            "path": self.path,
        }
        if self.metadata:
            result["metadata"] = self.metadata
        return result


@dataclass
class FileUpload:
    """One destination file being written. Received pieces are kept as they are (no copying
    into a staging buffer) and handed to writev in ~1 MiB batches."""

    path: str
    fd: int
    pending: list[bytes | memoryview] = field(default_factory=list)
    pending_bytes: int = 0

    @classmethod
    def open(cls, path: str, user: User) -> FileUpload:
        """Opens `path` for writing, its missing parents made: all of them `user`'s."""
        return cls(path, _open_for_upload(path, user))

    async def write(self, data: bytes | memoryview) -> None:
        self.pending.append(data)
        self.pending_bytes += len(data)
        if self.pending_bytes >= DISK_CHUNK or len(self.pending) >= MAX_PIECES:
            await self._flush()

    async def _flush(self) -> None:
        if not self.pending:
            return
        pieces, self.pending, self.pending_bytes = self.pending, [], 0
        try:
            await asyncio.to_thread(_writev_fully, self.fd, pieces)
        except OSError as exc:
            raise _upload_error(exc, self.path) from exc

    async def finish(self, metadata: dict[str, str] | None) -> WrittenFile:
        await self._flush()
        # Every upload replaces the metadata, none included: O_TRUNC keeps the xattrs of the
        # file's previous upload, which would otherwise outlive the content they described.
        try:
            write_metadata(self.fd, metadata or {})
        except OSError as exc:
            if exc.errno not in XATTR_UNSUPPORTED:
                raise _upload_error(exc, self.path) from exc
            # procfs/sysfs (writable through this API too) have no xattrs: the content is
            # written; the answer, read back below, does not claim the metadata was kept.
            log.warning("no xattrs on '%s': metadata not kept", self.path)
        return WrittenFile(self.path, read_metadata(self.fd) or None)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _open_for_upload(path: str, user: User) -> int:
    if os.path.isdir(path):
        raise invalid_argument(f"path '{path}' is a directory")
    try:
        make_dirs_owned(os.path.dirname(path), user)
        fd = _open_streamable(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise _not_streamable(path) from exc
        raise _upload_error(exc, path) from exc
    chown_to(fd, user)  # a file that existed becomes the caller's too, as upstream
    return fd


def _open_streamable(path: str, flags: int) -> int:
    """Opens `path` without waiting: envd acts as root for anyone, and a blocking open of a FIFO
    would stall its whole event loop (every request of the sandbox) until some peer appeared.
    A FIFO or socket has no content to stream, so it is refused; anything else is opened for
    blocking I/O as usual.

    :raise EnvdError: `path` is a FIFO or a socket (invalid_argument).
    :raise OSError: the open failed.
    """
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        os.close(fd)
        raise _not_streamable(path)
    os.set_blocking(fd, True)
    return fd


def _not_streamable(path: str) -> EnvdError:
    return invalid_argument(f"path '{path}' is a named pipe or socket, not a file")


def _writev_fully(fd: int, pieces: list[bytes | memoryview]) -> None:
    views = [memoryview(p) for p in pieces]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


def _upload_error(exc: OSError, path: str) -> EnvdError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(f"not enough disk space to write '{path}'")
    return os_error_to_envd(exc, path)


def _metadata_headers(request: Request) -> dict[str, str] | None:
    """`X-Metadata-<key>: <value>` headers, keys lowercased; as upstream, a bare
    `X-Metadata-` is ignored and a repeated header's first value wins."""
    metadata: dict[str, str] = {}
    for name, value in request.headers.items():
        lowered = name.lower()
        if lowered.startswith(METADATA_HEADER_PREFIX):
            key = lowered[len(METADATA_HEADER_PREFIX) :]
            if key:
                metadata.setdefault(key, value)
    problem = metadata_problem(metadata)
    if problem is not None:
        raise invalid_argument(f"invalid metadata: {problem}")
    return metadata or None


async def _decoded_body(request: Request) -> AsyncIterator[bytes]:
    """The request body, gunzipped/inflated when Content-Encoding says so, in bounded pieces."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        async for chunk in request.stream():
            if chunk:
                yield chunk
        return
    if encoding not in ("gzip", "deflate"):
        raise UnsupportedEncoding(f"unsupported content encoding '{encoding}'")
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        async for chunk in request.stream():
            data = chunk
            while data:
                out = inflater.decompress(data, DISK_CHUNK)
                data = inflater.unconsumed_tail
                if out:
                    yield out
        if tail := inflater.flush():
            yield tail
    except zlib.error as exc:
        raise invalid_argument(f"invalid {encoding} body: {exc}") from exc


__all__ = ["FilesEndpoint", "http_error", "json"]
