"""File put/get of the native API: a sandbox's file streamed through envd's `/files` (what the
E2B SDK's `files.write`/`files.read` use), chunk by chunk, never whole in the gateway's memory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp

from aenv.gateway.v1 import gateway_pb2
from aenv_common.errors import Internal, InvalidArgument
from aenv_gateway.core.guest_envd import Guest, GuestEnvd, http_refusal

_FILES = "/files"
# gRPC's default message limit is 4 MiB; this leaves room and keeps memory per call small.
CHUNK_BYTES = 1 << 20
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300)


class FileTransfers:
    def __init__(self, guests: GuestEnvd) -> None:
        self._guests = guests

    async def put(
        self, requests: AsyncIterator[gateway_pb2.PutFileRequest]
    ) -> gateway_pb2.PutFileResponse:
        """Writes the streamed bytes to the file `start` names.

        :raise InvalidArgument: no `start` first, no path, a directory's path.
        :raise NotFound: no such sandbox (or it died during the call).
        :raise PermissionDenied: the user may not write there.
        :raise ResourceExhausted: the guest's disk is full.
        """
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("request") != "start":
            raise InvalidArgument("the first message must be start")
        guest = await self._guest(first.start)
        sent = 0

        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            async for request in requests:
                if request.WhichOneof("request") != "data":
                    raise InvalidArgument("start must be the first message only")
                sent += len(request.data)
                yield request.data

        headers = {**guest.headers, "content-type": "application/octet-stream"}
        try:
            async with guest.session.post(
                guest.base_url + _FILES,
                params=_params(first.start),
                headers=headers,
                data=body(),
                timeout=_TIMEOUT,
            ) as resp:
                answer = await resp.read()
                if resp.status != 200:
                    raise http_refusal(guest.sandbox_id, resp.status, answer)
                return gateway_pb2.PutFileResponse(path=_written_path(answer), size=sent)
        except aiohttp.ClientError as err:
            raise await self._guests.broken(guest.sandbox_id, err) from err

    async def get(
        self, request: gateway_pb2.GetFileRequest
    ) -> AsyncIterator[gateway_pb2.GetFileResponse]:
        """The file's bytes in chunks; the first carries its size.

        :raise NotFound: no such sandbox or file.
        :raise InvalidArgument: no path, a directory's path.
        :raise PermissionDenied: the user may not read it.
        """
        guest = await self._guest(request.file)
        # Plain bytes: envd gzips for clients that accept it, and this session does not inflate.
        headers = {**guest.headers, "accept-encoding": "identity"}
        try:
            async with guest.session.get(
                guest.base_url + _FILES,
                params=_params(request.file),
                headers=headers,
                timeout=_TIMEOUT,
            ) as resp:
                if resp.status != 200:
                    raise http_refusal(guest.sandbox_id, resp.status, await resp.read())
                first = gateway_pb2.GetFileResponse()
                if resp.content_length is not None:
                    first.size = resp.content_length
                async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                    first.data = chunk
                    yield first
                    first = gateway_pb2.GetFileResponse()
                if first.HasField("size"):  # an empty file: its size alone
                    yield first
        except aiohttp.ClientError as err:
            raise await self._guests.broken(guest.sandbox_id, err) from err

    async def _guest(self, target: gateway_pb2.FileTarget) -> Guest:
        if not target.sandbox_id or not target.path:
            raise InvalidArgument("sandbox_id and path are required")
        return await self._guests.guest(target.sandbox_id)


def _params(target: gateway_pb2.FileTarget) -> dict[str, str]:
    params = {"path": target.path}
    if target.user:
        params["username"] = target.user
    return params


def _written_path(answer: bytes) -> str:
    """envd answers `[{"path": ..., "name": ..., "type": "file"}]` for the file written."""
    try:
        return str(json.loads(answer)[0]["path"])
    except (ValueError, LookupError, TypeError) as err:
        raise Internal(f"envd answered the upload unexpectedly: {answer[:200]!r}") from err
