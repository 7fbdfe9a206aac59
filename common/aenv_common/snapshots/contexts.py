"""Build contexts in snapstore: the files an E2B template's COPY steps upload (one tarball per
`filesHash`, as the SDK packs them), kept as manifest `context-<files_hash>` holding one file, so
the gateway that takes the upload and the node agent that builds need share nothing else.

    await has_context(stub, files_hash)                  # the gateway, asked for an upload link
    await push_context(stub, files_hash, tarball)        # the gateway, on upload
    path = await pull_context(stub, files_hash, folder)  # a node agent, on a COPY step
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import InvalidArgument, NotFound
from aenv_common.snapshots._rpc import typed_rpc_errors
from aenv_common.snapshots.pull import pull_files
from aenv_common.snapshots.push import PushStats, push_files

CONTEXT_FILE = "context"
_PREFIX = "context-"
_MAX_HASH = 128 - len(_PREFIX)


def context_manifest_id(files_hash: str) -> str:
    """:raise InvalidArgument: not the hex digest the SDK sends."""
    if not (0 < len(files_hash) <= _MAX_HASH and all(c in "0123456789abcdef" for c in files_hash)):
        raise InvalidArgument(f"files hash {files_hash[:80]!r} is not a lower-case hex digest")
    return _PREFIX + files_hash


async def push_context(stub: Any, files_hash: str, tarball: Path) -> PushStats:
    return await push_files(stub, context_manifest_id(files_hash), "", {CONTEXT_FILE: tarball},
                            {"kind": "build-context"})


async def has_context(stub: Any, files_hash: str) -> bool:
    """Whether someone uploaded it already (the SDK then skips its upload)."""
    try:
        with typed_rpc_errors():
            manifest_id = context_manifest_id(files_hash)
            await stub.GetManifest(pb.GetManifestRequest(snapshot_id=manifest_id))
    except NotFound:
        return False
    return True


async def pull_context(stub: Any, files_hash: str, folder: Path) -> Path:
    """The tarball, pulled into `folder`.

    :raise NotFound: nobody uploaded it.
    """
    files = await pull_files(stub, context_manifest_id(files_hash), folder)
    return files[CONTEXT_FILE]
