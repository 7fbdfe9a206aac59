"""The request stream of a file upload: where, then the bytes in chunks (a local file is read
chunk by chunk, never whole)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from aenv.gateway.v1 import gateway_pb2

# Under gRPC's default 4 MiB message limit, with room to spare.
CHUNK_BYTES = 1 << 20


async def upload_chunks(
    target: gateway_pb2.FileTarget, data: bytes | Path
) -> AsyncIterator[gateway_pb2.PutFileRequest]:
    yield gateway_pb2.PutFileRequest(start=target)
    if isinstance(data, bytes):
        view = memoryview(data)
        for offset in range(0, len(data), CHUNK_BYTES):
            yield gateway_pb2.PutFileRequest(data=bytes(view[offset : offset + CHUNK_BYTES]))
        return
    with data.open("rb") as source:
        while chunk := await asyncio.to_thread(source.read, CHUNK_BYTES):
            yield gateway_pb2.PutFileRequest(data=chunk)
