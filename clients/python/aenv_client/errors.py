"""The client's errors: the typed errors of `aenv_common.errors` (bad input, not found, no
capacity, ...) plus SandboxDied, a sandbox lost or killed under its user — infrastructure
failure, which a training loop must not score as a zero reward — with the cause its death
certificate names."""

from __future__ import annotations

import grpc

from aenv.gateway.v1 import gateway_pb2
from aenv_common.errors import (
    AenvError,
    AlreadyExists,
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from aenv_common.status_tables import from_rpc_error, from_status

__all__ = [
    "AenvError",
    "AlreadyExists",
    "Conflict",
    "DeadlineExceeded",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "SandboxDied",
    "Unauthenticated",
    "Unavailable",
    "item_error",
    "rpc_error",
]

# How the gateway says a sandbox's node went away with it (service.py, `_visible`).
_LOST = "was lost with its node"
# The trailing metadata of the gateway's NOT_FOUND for a sandbox that died (its certificate).
DEATH_CAUSE_METADATA = "aenv-death-cause"
DEATH_DETAIL_METADATA = "aenv-death-detail"


class SandboxDied(NotFound):
    """A sandbox is gone without this client killing it: its VM or its node died (`cause`
    says which, as the gateway's death certificate names it: "vmm_crash", "guest_oom",
    "node_lost", ...; `detail` says more), its timeout ended it, or another caller killed it (no
    cause then). A NotFound, so code that catches NotFound still does; a rollout should catch
    this first and retry the episode."""

    def __init__(self, message: str, cause: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.cause = cause
        self.detail = detail


def rpc_error(err: grpc.aio.AioRpcError, *, sandbox_died: bool = False) -> AenvError:
    """The typed error of a failed call. NOT_FOUND is SandboxDied when the gateway sent the
    sandbox's death certificate (for any call, whoever made the sandbox), when the sandbox was
    known to live (`sandbox_died`), or when the gateway says it was lost with its node."""
    typed = from_rpc_error(err)
    if not isinstance(typed, NotFound):
        return typed
    trailing = _metadata(err)
    if DEATH_CAUSE_METADATA in trailing:
        return SandboxDied(typed.message, trailing[DEATH_CAUSE_METADATA],
                           trailing.get(DEATH_DETAIL_METADATA, ""))
    if _LOST in typed.message:
        return SandboxDied(typed.message, "node_lost")
    if sandbox_died:
        return SandboxDied(typed.message)
    return typed


def _metadata(err: grpc.aio.AioRpcError) -> dict[str, str]:
    pairs = err.trailing_metadata() or ()
    return {key: value if isinstance(value, str) else value.decode(errors="replace")
            for key, value in pairs}


def item_error(error: gateway_pb2.SandboxError) -> AenvError:
    """A batch item's error as the typed error its create alone would have raised."""
    code = grpc.StatusCode.__members__.get(error.status, grpc.StatusCode.INTERNAL)
    return from_status(code, error.message)
