"""COPY contexts of template builds: the SDK asks for an upload link per `filesHash`, PUTs the
tarball there without its API key (as to an S3 presigned URL), and the building node pulls it
from snapstore (aenv_common.snapshots.contexts).

An upload link is signed with the gateway's API key (every gateway of a cluster has it), for
one hash, until it expires.
"""

from __future__ import annotations

import hashlib
import hmac
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aenv_common.errors import InvalidArgument, PermissionDenied, Unavailable
from aenv_common.snapshots.contexts import context_manifest_id, has_context, push_context

LINK_TTL_S = 3600
MAX_CONTEXT_BYTES = 20 << 30


class ContextUploads:
    def __init__(
        self,
        snapstore: Any | None,
        key: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._snapstore = snapstore
        self._key = key.encode()
        self._clock = clock

    async def link(self, template_id: str, files_hash: str, base_url: str) -> dict[str, Any]:
        """TemplateBuildFileUpload: present, or where to PUT it.

        :raise InvalidArgument: not a hex digest. :raise Unavailable: no snapstore.
        """
        context_manifest_id(files_hash)
        stub = self._stub()
        if await has_context(stub, files_hash):
            return {"present": True}
        expires = int(self._clock()) + LINK_TTL_S
        query = urlencode({"expires": expires, "signature": self._sign(files_hash, expires)})
        path = f"/templates/{template_id}/files/{files_hash}"
        return {"present": False, "url": f"{base_url.rstrip('/')}{path}?{query}"}

    async def receive(
        self, files_hash: str, expires: str, signature: str, body: AsyncIterator[bytes]
    ) -> None:
        """Stores an uploaded tarball.

        :raise PermissionDenied: the link is forged, for another hash, or expired.
        :raise InvalidArgument: larger than MAX_CONTEXT_BYTES.
        """
        context_manifest_id(files_hash)
        if not (expires.isascii() and expires.isdigit()) or int(expires) < self._clock():
            raise PermissionDenied("the upload link has expired")
        expected = self._sign(files_hash, int(expires))
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise PermissionDenied("invalid upload signature")
        stub = self._stub()
        with tempfile.TemporaryDirectory(prefix="aenv-context-") as scratch:
            tarball = Path(scratch) / "context"
            await _save(body, tarball)
            await push_context(stub, files_hash, tarball)

    def _stub(self) -> Any:
        if self._snapstore is None:
            raise Unavailable("COPY steps need a snapstore: none is configured "
                              "(AENV_GATEWAY_SNAPSTORE_ADDRESS)")
        return self._snapstore

    def _sign(self, files_hash: str, expires: int) -> str:
        material = f"context:{files_hash}:{expires}".encode()
        return hmac.new(self._key, material, hashlib.sha256).hexdigest()


async def _save(body: AsyncIterator[bytes], path: Path) -> None:
    size = 0
    with path.open("wb") as out:
        async for chunk in body:
            size += len(chunk)
            if size > MAX_CONTEXT_BYTES:
                raise InvalidArgument(f"a build context may hold at most {MAX_CONTEXT_BYTES} bytes")
            out.write(chunk)
