"""What each kind of error is called on each protocol: one table for HTTP, one for gRPC, and
the reverse gRPC table a client uses to rebuild the error a remote service raised.

The errors themselves (aenv_common.errors) are pure kinds; only the edges, which speak a
protocol, ask these tables. A table is keyed by class and looked up along the error's MRO, so a
subclass answers as its kind does unless the table names it itself (BadGateway is an Internal
that HTTP calls 502, and gRPC still INTERNAL).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import grpc

from aenv_common.errors import (
    AenvError,
    AlreadyExists,
    BadGateway,
    BodyTooLarge,
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    Relayed,
    RequestTimeout,
    ResourceExhausted,
    Retriable,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from aenv_common.retry_info import retry_after_from

_HTTP: Mapping[type[AenvError], int] = {
    AenvError: 500,
    InvalidArgument: 400,
    Unauthenticated: 401,
    PermissionDenied: 403,
    NotFound: 404,
    RequestTimeout: 408,
    Conflict: 409,
    AlreadyExists: 409,
    OutOfRange: 410,
    BodyTooLarge: 413,
    ResourceExhausted: 429,
    Internal: 500,
    Unimplemented: 501,
    BadGateway: 502,
    Unavailable: 503,
    DeadlineExceeded: 504,
}

_GRPC: Mapping[type[AenvError], grpc.StatusCode] = {
    AenvError: grpc.StatusCode.INTERNAL,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    OutOfRange: grpc.StatusCode.OUT_OF_RANGE,
    Conflict: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    Internal: grpc.StatusCode.INTERNAL,
    Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
}

# The kinds a gRPC status is rebuilt as. UNIMPLEMENTED stays Internal, as callers that catch
# Internal for a server's failure have always seen it; codes no kind has are Internal too.
_FROM_GRPC: Mapping[grpc.StatusCode, type[AenvError]] = {
    _GRPC[kind]: kind
    for kind in (
        InvalidArgument, Unauthenticated, PermissionDenied, NotFound, OutOfRange, Conflict,
        AlreadyExists, ResourceExhausted, Unavailable, DeadlineExceeded, Internal,
    )
}

_Status = TypeVar("_Status")


def _lookup(table: Mapping[type[AenvError], _Status], err: AenvError) -> _Status:
    """The entry of the nearest class along the error's MRO (AenvError's at the latest)."""
    for cls in type(err).__mro__:
        if cls in table:
            return table[cls]
    raise TypeError(f"{type(err).__name__} is no AenvError")


def http_status(err: AenvError) -> int:
    """The HTTP status an error answers with; a relayed refusal keeps its upstream's."""
    if isinstance(err, Relayed):
        return err.status
    return _lookup(_HTTP, err)


def grpc_status(err: AenvError) -> grpc.StatusCode:
    """The gRPC status code an error answers with."""
    return _lookup(_GRPC, err)


def from_status(code: grpc.StatusCode, message: str) -> AenvError:
    """The typed error of a gRPC status code (Internal for a code no error has)."""
    return _FROM_GRPC.get(code, Internal)(message)


def from_rpc_error(err: grpc.aio.AioRpcError) -> AenvError:
    """Rebuild the typed error a remote service raised from its gRPC status (with when to
    retry, for the kinds that carry it)."""
    message = err.details() or err.code().name.lower()
    typed = _FROM_GRPC.get(err.code(), Internal)
    if issubclass(typed, Retriable):
        return typed(message, retry_after_from(err.trailing_metadata()))
    return typed(message)
